"""Reproduction tables: our mean ± std over seeds beside the published value, and the difference.

The long format (one row per dataset × partition × method × metric) keeps every number addressable; the
``paper`` and ``delta`` columns answer "did we reproduce this cell, and by how much do we differ".
"""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import pandas as pd

from fed import provenance
from fed.metrics import mean_std
from fed.reporting.verdicts import (
    ABOVE,
    BELOW,
    COLOURS,
    DEFAULT_TOLERANCE,
    DIVERGED,
    NO_PAPER,
    NOT_COMPARABLE,
    NOT_IMPLEMENTED,
    REPRODUCED,
    Tolerance,
    category,
    verdict,
)

LAYOUTS = ("paper", "leaderboard")  # a table's `layout`: the paper's (verdicts), or fed.reporting.leaderboard


def published_papers() -> list[str]:
    """Papers whose published numbers we transcribed (``fed/reporting/data/<paper>.csv``)."""
    return sorted(
        p.name.removesuffix(".csv")
        for p in resources.files("fed.reporting").joinpath("data").iterdir()
        if p.name.endswith(".csv")
    )


def paper_values(paper: str) -> pd.DataFrame:
    """Published numbers of ``paper``, transcribed from the paper or read off its figures (package data
    ``fed/reporting/data``; ``read_uncertainty`` is set where a value was read from a figure, see
    ``fed.reporting.digitise``)."""
    columns = ["table", "dataset", "partition", "method", "metric", "value", "std", "read_uncertainty"]
    path = resources.files("fed.reporting").joinpath(f"data/{paper}.csv")
    if not path.is_file():  # e.g. the smoke table of every baseline: no published numbers
        return pd.DataFrame(columns=columns)
    with path.open() as fh:
        return pd.read_csv(fh, dtype={"value": str, "std": str, "read_uncertainty": str}, keep_default_na=False)


def collect_runs(cells: list[dict], last_rounds: int = 0) -> pd.DataFrame:
    """One row per (cell, metric): ``cells`` carry dataset, partition, method, seed and the metrics.json path;
    ``machine``: where the cell ran (``fed.provenance.kind``). ``last_rounds`` > 0 adds ``recent``: the metric in
    each of the run's last ``last_rounds`` rounds (NaN where a round did not record it)."""
    rows = []
    for cell in cells:
        summary = json.loads(Path(cell["path"]).read_text())
        history = summary.get("history", [])[-last_rounds:] if last_rounds else []
        for protocol in ("last", "best"):
            for metric, value in summary[protocol].items():
                value = math.nan if value is None and summary["diverged"] else value  # strict JSON: NaN as null
                if isinstance(value, (int, float)) and metric != "round":
                    rows.append(
                        {
                            **{k: cell[k] for k in ("dataset", "partition", "method", "seed")},
                            "protocol": protocol,
                            "metric": metric,
                            "value": float(value),
                            "diverged": summary["diverged"],
                            "machine": provenance.kind(summary),
                        }
                        | ({"recent": tuple(_number(h.get(metric)) for h in history)} if last_rounds else {})
                    )
    columns = ["dataset", "partition", "method", "seed", "protocol", "metric", "value", "diverged", "machine"]
    return pd.DataFrame(rows, columns=columns + (["recent"] if last_rounds else []))


def _number(value) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan


def machine_note(runs: pd.DataFrame) -> str:
    """The caption's sentence on where the cells of ``runs`` (``collect_runs``) ran; empty for one machine kind."""
    cells = runs.drop_duplicates(["dataset", "partition", "method", "seed"])
    return provenance.mix_note(cells.machine.tolist())


def mixes_machines(runs: pd.DataFrame) -> bool:
    """Whether the cells of ``runs`` ran on more than one kind of machine (cells that predate the record count as
    a kind of their own: where they ran is unknown)."""
    return runs.machine.nunique() > 1


def fmt(mean: float, std: float, digits: int = 2) -> str:
    if not math.isfinite(mean):
        return "—"
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if math.isfinite(std) else "")


def build_table(
    runs: pd.DataFrame,
    paper: pd.DataFrame,
    table: str,
    datasets: list[str],
    partitions: list[str],
    methods: dict[str, str],
    metrics: list[str],
    protocol: str,
    implemented: set[str],
    sweeps: dict[str, list[str]] | None = None,
    select_by: str = "local_acc_mean",
    not_comparable: str = "",
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    paper_dataset: dict[str, str] | None = None,
    paper_partition: dict[str, str] | None = None,
    paper_where: dict[str, object] | None = None,
    last_rounds: int = 0,
) -> pd.DataFrame:
    """``methods`` maps our method variant name to the paper's method key; diverged seeds are counted and shown,
    never averaged in. A swept method (``sweeps``: method → its variants) shows, per dataset and partition, the
    variant with the best mean ``select_by`` at the last round — by default the clients' held-out local test
    splits, never the external test set the table reports. Every row carries its verdict (``fed.reporting.verdicts``);
    ``not_comparable`` says how the preset departs from the paper's protocol, if it does. ``paper_where`` keeps the
    published rows with those column values (FLea's Table 1 has a block per ``scarcity``); ``paper_dataset`` maps our
    dataset to the paper's (a stand-in shows the number it stands in for, and its verdict says not comparable),
    ``paper_partition`` our partition name to the paper's. ``last_rounds`` > 0 (``runs`` from ``collect_runs`` with
    the same number) adds each seed's value and its last rounds' range (``per_seed``)."""
    sweeps = sweeps or {}
    chosen = select_variants(runs, sweeps, select_by)
    paper = paper[paper["table"] == table]
    if "read_uncertainty" not in paper.columns:  # transcribed numbers only
        paper = paper.assign(read_uncertainty="")
    for column, value in (paper_where or {}).items():
        if column not in paper.columns:
            raise ValueError(f"paper_where: the published numbers of {table!r} have no column {column!r}")
        paper = paper[paper[column].astype(str) == str(value)]
    ref = paper.set_index(["dataset", "partition", "method", "metric"])
    if not ref.index.is_unique:
        dup = ref.index[ref.index.duplicated()].tolist()[:3]
        raise ValueError(f"{table}: several published numbers per cell (e.g. {dup}); narrow them with paper_where")
    rows = []
    for dataset in datasets:
        for partition in partitions:
            for variant, paper_method in methods.items():
                for metric in metrics:
                    theirs = (paper_dataset or {}).get(dataset, dataset)
                    key = (theirs, (paper_partition or {}).get(partition, partition), paper_method, metric)
                    if key not in ref.index:  # one number for every partition (DA-FL's centralized training)
                        key = (theirs, "", paper_method, metric)
                    p_val, p_std, p_read = (
                        ref.loc[key, ["value", "std", "read_uncertainty"]] if key in ref.index else ("", "", "")
                    )
                    row = {
                        "dataset": dataset,
                        "partition": partition,
                        "method": variant,
                        "metric": metric,
                        "paper": p_val + (f" ± {p_std}" if p_std else "") if p_val else "not reported",
                    }
                    shown = chosen.get((dataset, partition, variant), variant)
                    if variant in sweeps:
                        row["variant"] = f"{shown} (best {select_by} of {len(sweeps[variant])})"
                    sel = (
                        runs[
                            (runs.dataset == dataset)
                            & (runs.partition == partition)
                            & (runs.method == shown)
                            & (runs.metric == metric)
                        ]
                        if len(runs)
                        else runs
                    )
                    paper_value = float(p_val) if p_val else math.nan
                    paper_std = float(p_std) if p_std else math.nan
                    paper_read = float(p_read) if p_read else math.nan
                    row |= {"paper_value": paper_value, "paper_std": paper_std, "paper_read_uncertainty": paper_read}
                    row |= _ours(
                        sel, protocol, variant in implemented, paper_value, paper_std, not_comparable, tolerance,
                        paper_read,
                    )  # fmt: skip
                    if last_rounds:  # one round's reading: the tolerance of one run, no spread of ours
                        one_run = tolerance.allowed(paper_value, paper_std, math.nan, paper_read)
                        row |= per_seed(sel[sel.protocol == protocol], paper_value, one_run)
                    rows.append(row)
    return pd.DataFrame(rows)


def select_variants(runs: pd.DataFrame, sweeps: dict[str, list[str]], select_by: str) -> dict[tuple, str]:
    """(dataset, partition, swept method) → its variant with the highest mean ``select_by`` over the seeds that
    did not diverge (last round)."""
    chosen: dict[tuple, str] = {}
    if not len(runs):
        return chosen
    for method, variants in sweeps.items():
        sel = runs[
            (runs.metric == select_by)
            & (runs.protocol == "last")
            & runs.method.isin(variants)
            & ~runs.diverged.astype(bool)
        ]
        means = sel.groupby(["dataset", "partition", "method"])["value"].mean()
        for (dataset, partition), group in means.groupby(level=[0, 1]):
            chosen[(dataset, partition, method)] = group.idxmax()[2]
    return chosen


def _ours(
    sel: pd.DataFrame,
    protocol: str,
    implemented: bool,
    paper_value: float,
    paper_std: float,
    not_comparable: str,
    tolerance: Tolerance,
    read_uncertainty: float = math.nan,
) -> dict:
    if not implemented:
        return {
            "ours": NOT_IMPLEMENTED,
            "ours_mean": math.nan,
            "ours_std": math.nan,
            "seeds": 0,
            "diverged_seeds": 0,
            "delta": math.nan,
            "verdict": NOT_IMPLEMENTED,
        }
    out = {}
    for prot in dict.fromkeys([protocol, "last"]):
        s = sel[sel.protocol == prot]
        ok = s[~s.diverged.astype(bool)]["value"].tolist()
        mean, std, n = mean_std(ok)
        col = "ours" if prot == protocol else "ours (last round)"
        out[col] = fmt(mean, std)
        if prot == protocol:
            n_div = int(s.diverged.astype(bool).sum())
            out |= {
                "ours_mean": mean,
                "ours_std": std,
                "seeds": n,
                "diverged_seeds": n_div,
                "delta": mean - paper_value,
                "verdict": verdict(
                    mean, std, n, n_div, paper_value, paper_std, not_comparable, tolerance, read_uncertainty
                ),
            }
    return out


PER_SEED = ("per seed", "last rounds", "last rounds within tolerance")


def per_seed(sel: pd.DataFrame, paper: float, allowed: float) -> dict[str, str]:
    """A cell's seeds, in seed order: each one's value (or "diverged"), the range of its last rounds (``recent``)
    and how many of them are within ``allowed`` (the one-run tolerance) of the paper's value — how far a reading
    at one round could have moved."""
    seeds = sel.sort_values("seed")
    values, ranges, within = [], [], []
    for r in seeds.itertuples():
        values.append("diverged" if r.diverged else f"{r.value:.2f}")
        recent = [v for v in r.recent if math.isfinite(v)]
        ranges.append(f"{min(recent):.2f}–{max(recent):.2f}" if recent else "—")
        near = sum(abs(v - paper) <= allowed for v in recent)
        within.append(f"{near} of {len(r.recent)}" if math.isfinite(paper) else "—")
    return dict(zip(PER_SEED, (" / ".join(x) if x else "—" for x in (values, ranges, within))))


def paper_layout(df: pd.DataFrame) -> pd.DataFrame:
    """The paper's own layout: methods as rows, dataset × partition × metric as columns; each cell holds
    "ours ± std (paper ± std)" and, in ``.attrs['verdicts']``, its verdict (same shape)."""

    def text(r):
        paper = "—" if not math.isfinite(r.paper_value) else fmt(r.paper_value, r.paper_std)
        # a mean over the seeds that did not diverge says so (where all did, the verdict says it)
        lost = (
            f" [{r.diverged_seeds} of {r.seeds + r.diverged_seeds} seeds diverged]"
            if r.diverged_seeds and r.seeds
            else ""
        )
        return f"{r.ours}{lost} ({paper})"

    cells = df.assign(cell=[text(r) for r in df.itertuples()])
    cols = ["dataset", "partition", "metric"]
    table = cells.pivot_table(index="method", columns=cols, values="cell", aggfunc="first", sort=False)
    verdicts = cells.pivot_table(index="method", columns=cols, values="verdict", aggfunc="first", sort=False)
    order = list(dict.fromkeys(df.method))
    table, verdicts = table.reindex(order), verdicts.reindex(order)
    table.attrs["verdicts"] = verdicts
    return table


MARKS = {REPRODUCED: "✓", ABOVE: "↑", BELOW: "↓", NOT_COMPARABLE: "≠", NO_PAPER: "", DIVERGED: "✗"}


def verdict_counts(df: pd.DataFrame) -> dict[str, int]:
    return df.verdict.map(category).value_counts().to_dict()


def write_table(
    df: pd.DataFrame,
    out_prefix: str | Path,
    caption: str,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    last_rounds: int = 0,
) -> None:
    """A reproduction table: the long form (one row per cell and metric, every number) in the CSV; the paper's
    layout, each cell "ours ± std (paper ± std)" marked (md) or coloured (html) by its verdict, in md and html;
    then, with ``last_rounds`` (``build_table``'s), each cell's seeds and their last rounds."""
    out = Path(out_prefix)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out.with_suffix(".csv"), index=False)
    layout = paper_layout(df)
    verdicts = layout.attrs["verdicts"]
    counts = ", ".join(f"{n} {v}" for v, n in sorted(verdict_counts(df).items()))
    legend = (
        f"Verdicts ({counts}): reproduced ✓ when {tolerance.describe()}; above ↑ / below ↓ the paper "
        "otherwise; ≠ not comparable (a reduced preset); no mark: no paper value; ✗ every seed diverged. "
        "The CSV has every number, one row per cell."
    )
    header = [" / ".join(str(x) for x in col) for col in layout.columns]
    md_rows = [
        [m, *[f"{layout.loc[m, c]} {MARKS.get(category(str(verdicts.loc[m, c])), '')}".strip() for c in layout.columns]]
        for m in layout.index
    ]
    md = pd.DataFrame(md_rows, columns=["method", *header]).to_markdown(index=False)
    seeds_md = seeds_html = ""
    if last_rounds:
        seeds = df[["dataset", "partition", "method", "metric", "paper", *PER_SEED]].rename(
            columns={PER_SEED[1]: f"last {last_rounds} rounds", PER_SEED[2]: "of those within tolerance"}
        )
        intro = (
            f"Per seed, in seed order: its value, the range of its last {last_rounds} rounds, and how many of those "
            "rounds are within the one-run tolerance of the paper's value (how far a reading at another round could "
            "have moved the cell)."
        )
        seeds_md = f"\n{intro}\n\n{seeds.to_markdown(index=False, disable_numparse=True)}\n"
        seeds_html = f"<p>{_html_escape(intro)}</p>" + seeds.to_html(index=False, border=0, classes="fedrepro-table")
    out.with_suffix(".md").write_text(f"{caption}\n\n{md}\n\n{legend}\n{seeds_md}")
    head = "".join(f"<th>{_html_escape(h)}</th>" for h in ["method", *header])
    body = "".join(
        "<tr><td>"
        + _html_escape(str(m))
        + "</td>"
        + "".join(
            f"<td style='background:{COLOURS.get(category(str(verdicts.loc[m, c])), '#fff')}' "
            f"title='{_html_escape(str(verdicts.loc[m, c]))}'>{_html_escape(str(layout.loc[m, c]))}</td>"
            for c in layout.columns
        )
        + "</tr>"
        for m in layout.index
    )
    swatches = " ".join(
        f"<span style='background:{COLOURS[v]};padding:1px 6px'>{v}</span>"
        for v in (REPRODUCED, ABOVE, BELOW, NOT_COMPARABLE, NO_PAPER, DIVERGED)
    )
    out.with_suffix(".html").write_text(
        f"{HTML_HEAD}<p>{_html_escape(caption)}</p><table class='fedrepro-table'><tr>{head}</tr>{body}</table>"
        f"<p>{swatches}</p><p>{_html_escape(legend)}</p>{seeds_html}\n"
    )


def write_frame(
    df: pd.DataFrame,
    out_prefix: str | Path,
    caption: str,
    csv_frame: pd.DataFrame | None = None,
    before: tuple[str, pd.DataFrame] | None = None,
) -> None:
    """Write ``<prefix>.csv`` (machine-readable), ``.md`` and ``.html`` (with the caption, for the report; a missing
    number left blank in both, as "not applicable", never "nan"); ``before``: a (title, frame) shown first in the md
    and html, after the caption."""
    out = Path(out_prefix)
    out.parent.mkdir(parents=True, exist_ok=True)
    (df if csv_frame is None else csv_frame).to_csv(out.with_suffix(".csv"), index=False)
    md, html = [caption], f"{HTML_HEAD}<p>{_html_escape(caption)}</p>"
    for title, frame in [before, ("", df)] if before else [("", df)]:
        if title:
            md.append(title)
            html += f"<p>{_html_escape(title)}</p>"
        md.append(frame.astype(object).where(frame.notna(), None).to_markdown(index=False, missingval=""))
        html += frame.to_html(index=False, na_rep="", border=0, classes="fedrepro-table")
    out.with_suffix(".md").write_text("\n\n".join(md) + "\n")
    out.with_suffix(".html").write_text(html + "\n")


HTML_HEAD = (
    "<!doctype html><meta charset='utf-8'><style>table{border-collapse:collapse;font:13px sans-serif}"
    "td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left}</style>"
)


def _html_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\n", "<br>")


COST_DECIMALS = 2  # how the cost table is printed (its CSV, averaged by the answer table, stays unrounded)


def cost_table(cells: list[dict], baseline: str = "fedavg", decimals: int | None = COST_DECIMALS) -> pd.DataFrame:
    """Measured cost per (dataset, partition, method): wall time of a run, seconds per round (none where a run
    trained no round), the local steps of a run (every client's, summed over its rounds; where recorded), ZSDG
    seconds per round, the wall time relative to FedAvg (``baseline``: its method name) on the same dataset and
    partition (mean over seeds), and ZSDG's quality: the accuracy (%) of each source model on the samples it
    generated. Rounded to ``decimals`` (``None``: unrounded, for the CSV that another table averages)."""
    rows = []
    for cell in cells:
        summary = json.loads(Path(cell["path"]).read_text())
        hist = pd.DataFrame(summary["history"])
        rows.append(
            {
                **{k: cell[k] for k in ("dataset", "partition", "method", "seed")},
                "wall_seconds": summary["wall_seconds"],
                "rounds": summary["rounds_completed"],
                "seconds_per_round": hist["seconds"].mean() if "seconds" in hist else math.nan,
                "local_steps": hist["local_steps"].sum() if "local_steps" in hist else math.nan,
                "zsdg_seconds_per_round": hist["zsdg_seconds"].mean() if "zsdg_seconds" in hist else 0.0,
                "zsdg_source_acc": hist["zsdg_source_acc"].mean() if "zsdg_source_acc" in hist else math.nan,
            }
        )
    df = (
        pd.DataFrame(rows)
        .groupby(["dataset", "partition", "method"], sort=False)
        .agg(
            seeds=("seed", "count"),
            wall_seconds=("wall_seconds", "mean"),
            rounds=("rounds", "max"),
            seconds_per_round=("seconds_per_round", "mean"),
            local_steps=("local_steps", "mean"),
            zsdg_seconds_per_round=("zsdg_seconds_per_round", "mean"),
            zsdg_source_acc=("zsdg_source_acc", "mean"),
        )
        .reset_index()
    )
    base = df[df.method == baseline].set_index(["dataset", "partition"])["wall_seconds"]
    df["relative_to_fedavg"] = [
        row.wall_seconds / base.get((row.dataset, row.partition), math.nan) for row in df.itertuples()
    ]
    return df if decimals is None else df.round(decimals)


LEDGER_NOTES = {
    "epsilon_classical_per_release": "FedDPMS slides' bound ε = √(2 ln(1.25/δ))/σ (for σ = 4, δ = 0.01: 0.78, not the "
    "slides' stated 0.5)",
    "epsilon_exact_per_release": "analytic Gaussian mechanism, one release (for σ = 4, δ = 0.01: 0.36)",
    "epsilon_exact": "every noisy draw of a class mean composed (the attempts a donor needed to keep its quota)",
}


LEDGER_DECIMALS = 4  # how the privacy ledger is printed (δ aside: ledger_decimals)


def privacy_table(cells: list[dict], decimals: int | None = LEDGER_DECIMALS) -> pd.DataFrame:
    """What left the clients per (dataset, partition, method) — the privacy ledger of each run's ``metrics.json``
    (``shared``: counts of what was shared, and the guarantees stated for it: ε, δ, clipping), the largest value
    over seeds for every number, rounded to ``decimals`` (``None``: unrounded). Methods that share nothing but model
    updates have an empty ledger."""
    rows = []
    for cell in cells:
        shared = json.loads(Path(cell["path"]).read_text()).get("shared", {})
        rows.append({**{k: cell[k] for k in ("dataset", "partition", "method")}, **shared})
    df = pd.DataFrame(rows)
    keys = ["dataset", "partition", "method"]
    entries = [c for c in df.columns if c not in keys]
    numeric = {c: "max" for c in entries if pd.api.types.is_numeric_dtype(df[c])}
    other = {c: "first" for c in entries if c not in numeric}  # "inf": no noise
    out = df.groupby(keys, sort=False).agg({**numeric, **other}).reset_index() if entries else df.drop_duplicates()
    out = out[keys + entries]
    return out if decimals is None else out.round(ledger_decimals(entries, decimals))


def ledger_decimals(columns, decimals: int = LEDGER_DECIMALS) -> dict[str, int]:
    """How a privacy ledger's columns are printed: ``decimals`` each, but δ, whose 1e-5 would print as 0."""
    return {c: decimals for c in columns if c != "delta"}
