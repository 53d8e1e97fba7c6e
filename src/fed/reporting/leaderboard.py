"""Leaderboards: every method of a table against one baseline, per non-IID regime, with a paired test over seeds.

A *regime* r is a (dataset, partition); it is labelled by its partition, or "dataset/partition" when the table has
several datasets. x_{m,r,s} is the value of a metric for method m, regime r and seed s at the round the preset
reports (``report: last|best``, read by ``fed.reporting.tables.collect_runs`` as every table reads it); a seed whose
run diverged has no value: it is never averaged in and never paired, and its row says so. S_{m,r} is the set of
seeds with a value, n = |S_{m,r}|. Per regime, method and metric:

- mean and sample std over seeds (``fed.metrics.mean_std``): x̄ = Σ_s x_{m,r,s} / n,
  sd = √(Σ_s (x_{m,r,s} − x̄)² / (n − 1));
- rank: 1 + the number of methods of the table with a strictly better mean in r (ties share a rank: 1, 2, 2, 4),
  better meaning higher, or lower for the variances (``fed.metrics.LOWER_IS_BETTER``);
- the paired difference to the baseline b over P = S_{m,r} ∩ S_{b,r}, the seeds where both converged (the same seed
  is the same partition draw and the same initialisation): d_s = x_{m,r,s} − x_{b,r,s}, diff = d̄ = Σ_{s∈P} d_s / |P|,
  and Student's paired t = d̄ / (sd_d / √|P|) with |P| − 1 degrees of freedom, two-sided p
  (``scipy.stats.ttest_rel``); no test with |P| < 2. When every d_s is the same, sd_d = 0: t = ±∞ and p = 0, or
  t = 0 and p = 1 when every d_s is 0 (zero spread is decisive, as in ``fed.reporting.claims.better``).

"All regimes", one row per method and metric: mean and sample std over every (regime, seed) value, the mean of the
method's ranks over the regimes, and the same paired test over every (regime, seed) pair of P's.

The p-values are corrected with Holm's step-down method (``holm``; ``scipy.stats`` has only Benjamini–Hochberg and
Benjamini–Yekutieli FDR control, ``false_discovery_control``, and statsmodels is not a dependency) over the m
comparisons of one metric that have a test — every method but the baseline, in every regime and over all regimes —
and a comparison is significant when its adjusted p < α = 0.05. The family is per metric, so a figure of one metric
over the table's methods, regimes and seeds (``figure_kinds.gain_heatmap``) has the table's numbers.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd  # scipy.stats is imported in the functions that test (≈ 1 s; the workflow imports this)

from fed.metrics import LOWER_IS_BETTER, mean_std
from fed.reporting.tables import fmt, select_variants, write_frame

ALPHA = 0.05
ALL = "all regimes"
DEFAULT_BASELINE = "fedavg"
COLUMNS = [
    "dataset", "partition", "regime", "method", "metric", "higher_is_better", "mean", "std", "seeds",
    "diverged_seeds", "rank", "baseline", "diff", "pairs", "t", "p", "p_holm", "significant", "note",
]  # fmt: skip


def higher_is_better(metric: str) -> bool:
    """Accuracies: higher is better; the fairness variances (``fed.metrics.LOWER_IS_BETTER``): lower."""
    return metric not in LOWER_IS_BETTER


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjustment of m p-values (NaN entries are not comparisons: they stay NaN and do not count in
    m). With p_(1) ≤ … ≤ p_(m) sorted, p̃_(i) = min(1, max_{j ≤ i} (m − j + 1) · p_(j)); rejecting p̃ < α controls
    the family-wise error rate at α under any dependence between the tests."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    tested = np.flatnonzero(np.isfinite(p))
    running = 0.0
    for i, k in enumerate(tested[np.argsort(p[tested], kind="stable")]):
        running = max(running, min(1.0, (len(tested) - i) * p[k]))
        out[k] = running
    return out


def paired_t(x, y) -> tuple[float, float]:
    """Student's paired t-test of x against y (values of the same seeds, in the same order): (t, two-sided p);
    NaN below 2 pairs; zero spread of the differences is decisive (module docstring)."""
    from scipy import stats

    d = np.asarray(x, dtype=float) - np.asarray(y, dtype=float)
    if len(d) < 2:
        return math.nan, math.nan
    if np.all(d == d[0]):
        return (0.0, 1.0) if d[0] == 0 else (math.copysign(math.inf, d[0]), 0.0)
    result = stats.ttest_rel(x, y)
    return float(result.statistic), float(result.pvalue)


def seed_values(runs: pd.DataFrame, metric: str, protocol: str) -> pd.DataFrame:
    """x_{m,r,s}: one row per (dataset, partition, method, seed) of ``collect_runs`` with ``metric``'s value at the
    ``protocol``'s round, NaN where the run diverged (also when it diverged before its first evaluation and so has
    no best round)."""
    keys = ["dataset", "partition", "method", "seed"]
    cells = runs[keys].assign(diverged=runs.diverged.astype(bool)).drop_duplicates(keys)
    sel = runs[(runs.protocol == protocol) & (runs.metric == metric)][[*keys, "value"]]
    out = cells.merge(sel, on=keys, how="left")
    out["value"] = out.value.where(~out.diverged)
    return out[out.diverged | out.value.notna()][[*keys, "value", "diverged"]]


def regime_label(dataset: str, partition: str, several_datasets: bool) -> str:
    return f"{dataset}/{partition}" if several_datasets else partition


def leaderboard(
    runs: pd.DataFrame,
    datasets: list[str],
    partitions: list[str],
    methods: list[str],
    metrics: list[str],
    protocol: str,
    baseline: str = DEFAULT_BASELINE,
    sweeps: dict[str, list[str]] | None = None,
    select_by: str = "local_acc_mean",
) -> pd.DataFrame:
    """The leaderboard in long form (the CSV): one row per (regime, method, metric), regimes in table order, then
    one "all regimes" row per (method, metric); columns ``COLUMNS`` (and ``variant`` with ``sweeps``). ``runs``:
    ``fed.reporting.tables.collect_runs`` of the table's cells; ``protocol``: the preset's ``report``. A swept
    method (``sweeps``: method → its variants) is, per regime, its variant with the best mean ``select_by`` at the
    last round, as in the paper tables (``select_variants``). The formulas are in the module docstring."""
    if baseline not in methods:
        raise ValueError(f"the baseline {baseline!r} is not among the methods {methods}")
    sweeps = sweeps or {}
    chosen = select_variants(runs, sweeps, select_by)
    several = len(datasets) > 1
    regimes = [(d, p) for d in datasets for p in partitions]
    rows = []
    for metric in metrics:
        higher = higher_is_better(metric)
        values = seed_values(runs, metric, protocol).set_index(["dataset", "partition", "method"])
        series = {}  # (regime, method) -> seed -> value (NaN: diverged)
        for d, p in regimes:
            for m in methods:
                key = (d, p, chosen.get((d, p, m), m))
                v = values.loc[[key]] if key in values.index else values.iloc[:0]
                series[(d, p), m] = v.set_index("seed")["value"].sort_index()
        block = []
        for d, p in regimes:
            label = regime_label(d, p, several)
            for m in methods:
                x, b = series[(d, p), m], series[(d, p), baseline]
                row = {"dataset": d, "partition": p, "regime": label, "method": m, "metric": metric}
                if m in sweeps:
                    row["variant"] = chosen.get((d, p, m), "")
                block.append(row | _statistics(x, b, m == baseline, "seed {}".format))
            means = pd.Series({r["method"]: r["mean"] for r in block[-len(methods) :]})
            ranks = means.rank(method="min", ascending=not higher)
            for r in block[-len(methods) :]:
                r["rank"] = ranks[r["method"]]
        for m in methods:
            pooled = {regime_label(d, p, several): (series[(d, p), m], series[(d, p), baseline]) for d, p in regimes}
            x = pd.concat({k: v[0] for k, v in pooled.items()}) if pooled else pd.Series(dtype=float)
            b = pd.concat({k: v[1] for k, v in pooled.items()}) if pooled else pd.Series(dtype=float)
            row = {"dataset": datasets[0] if not several else "all", "partition": ALL, "regime": ALL, "method": m}
            row["metric"] = metric
            if m in sweeps:
                row["variant"] = "per regime"
            row |= _statistics(x, b, m == baseline, lambda key: f"{key[0]} seed {key[1]}")
            row["rank"] = pd.Series([r["rank"] for r in block if r["method"] == m], dtype=float).mean()
            block.append(row)
        adjusted = holm([r["p"] for r in block])
        for r, p_holm in zip(block, adjusted):
            r |= {"higher_is_better": higher, "baseline": baseline, "p_holm": p_holm, "significant": p_holm < ALPHA}
        rows += block
    columns = COLUMNS[:4] + (["variant"] if sweeps else []) + COLUMNS[4:]
    return pd.DataFrame(rows, columns=columns)


def _statistics(x: pd.Series, b: pd.Series, is_baseline: bool, name) -> dict:
    """Mean ± std of x over its converged seeds, and the paired test of x against the baseline's b (both indexed by
    seed, or by (regime, seed) over all regimes; NaN: diverged); ``name`` labels an index entry in the note."""
    kept = x.dropna()
    mean, std, n = mean_std(kept.tolist())
    lost = [name(k) for k in x.index[x.isna()]]
    notes = [f"diverged: {', '.join(lost)} (not averaged in, not paired)"] if lost else []
    out = {"mean": mean, "std": std, "seeds": n, "diverged_seeds": len(lost)}
    if is_baseline:
        notes.insert(0, "baseline")
        return out | {"diff": math.nan, "pairs": n, "t": math.nan, "p": math.nan, "note": "; ".join(notes)}
    paired = kept.index.intersection(b.dropna().index)
    unpaired = [name(k) for k in kept.index.difference(paired)]
    if unpaired:
        notes.append(f"baseline missing or diverged: {', '.join(unpaired)} (not paired)")
    if not len(x):
        notes.append("no runs")
    elif len(paired) < 2:
        notes.append("no test: fewer than 2 paired seeds")
    xs, bs = kept.loc[paired].to_numpy(), b.loc[paired].to_numpy()
    t, p = paired_t(xs, bs)
    diff = float(np.mean(xs - bs)) if len(paired) else math.nan
    return out | {"diff": diff, "pairs": len(paired), "t": t, "p": p, "note": "; ".join(notes)}


def gains(board: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The comparisons with the baseline of one ``metric``: one row per method but the baseline and regime (all
    regimes last) — what ``gain_heatmap`` draws."""
    rows = board[(board.metric == metric) & (board.method != board.baseline)]
    return rows[["regime", "dataset", "partition", "method", "metric", "baseline", "mean", "diff", "pairs", "t", "p",
                 "p_holm", "significant", "note"]].reset_index(drop=True)  # fmt: skip


def layout(board: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard for reading (md, html): per regime (all regimes last) its methods by rank of the first
    metric; per metric "mean ± std (diff*)", diff the mean paired difference to the baseline and * significant
    after Holm; the first metric's adjusted p; the seeds, and the notes (diverged seeds)."""
    metrics = list(dict.fromkeys(board.metric))
    first = board[board.metric == metrics[0]]
    cells = board.set_index(["regime", "method", "metric"])
    rows = []
    for regime, group in first.groupby("regime", sort=False):
        for r in group.sort_values("rank", kind="stable", na_position="last").itertuples():
            row = {"regime": regime, "rank": _rank(r.rank, regime == ALL), "method": r.method}
            if "variant" in board:
                row["variant"] = r.variant if isinstance(r.variant, str) else ""  # only swept methods have one
            for metric in metrics:
                c = cells.loc[(regime, r.method, metric)]
                arrow = "↑" if c.higher_is_better else "↓"
                row[f"{metric} {arrow}"] = _with_diff(fmt(c["mean"], c["std"]), c)
            row[f"p Holm ({metrics[0]})"] = f"{r.p_holm:.3g}" if math.isfinite(r.p_holm) else ""
            row["seeds"] = f"{r.seeds}" + (f" ({r.diverged_seeds} diverged)" if r.diverged_seeds else "")
            row["note"] = r.note
            rows.append(row)
    return pd.DataFrame(rows)


def matrix(board: pd.DataFrame) -> pd.DataFrame:
    """The first metric at a glance: one row per method, one column per regime (all regimes last). A method's cell
    is "mean (diff*)" (the baseline's: "mean ± std"; one whose every seed diverged: "diverged (k of k)"), its
    all-regimes cell the pooled "diff*" and its Holm-adjusted p beside it; rows from the best pooled difference to
    the worst (the baseline at 0, untested methods last)."""
    metric = board.metric.iloc[0]
    first = board[board.metric == metric]
    regimes = [r for r in dict.fromkeys(first.regime) if r != ALL]
    cells = first.set_index(["regime", "method"])
    pooled = cells.loc[ALL]
    order = pooled["diff"].where(pooled.index != pooled.baseline, 0.0) * (1 if higher_is_better(metric) else -1)
    rows = []
    for method in order.sort_values(ascending=False, kind="stable", na_position="last").index:
        row = {"method": method}
        for regime in regimes:
            c = cells.loc[(regime, method)]
            shown = fmt(c["mean"], c["std"]) if method == c.baseline else _with_diff(fmt(c["mean"], math.nan), c)
            row[regime] = _no_value(c) or shown
        c = pooled.loc[method]
        row[f"{ALL} (diff)"] = "—" if method == c.baseline else difference(c)
        row["p Holm"] = f"{c.p_holm:.2g}" if math.isfinite(c.p_holm) else ""
        rows.append(row)
    return pd.DataFrame(rows)


def _no_value(c) -> str:
    """A cell with no converged seed: "diverged (k of k)" where its seeds diverged, else "" (it has a value, or its
    row is not tested)."""
    return f"diverged ({c.diverged_seeds} of {c.diverged_seeds})" if c.seeds == 0 and c.diverged_seeds else ""


def difference(c) -> str:
    """A method's paired difference to the baseline as the tables print it: "±d.dd*", "diverged (k of k)" where
    every seed diverged, "" where there is none."""
    return _no_value(c) or _diff(c)


def _diff(c) -> str:
    """A row's paired difference to the baseline, "±d.dd" with * when it is significant after Holm ("" if none)."""
    return f"{c['diff']:+.2f}{'*' if c['significant'] else ''}" if math.isfinite(c["diff"]) else ""


def _with_diff(text: str, c) -> str:
    """``text`` and, where there is a paired difference, " (±d.dd*)" (``_diff``)."""
    return f"{text} ({diff})" if (diff := _diff(c)) else text


def _rank(rank: float, mean: bool) -> str:
    if not math.isfinite(rank):
        return "—"
    return f"{rank:.1f} (mean)" if mean else f"{rank:.0f}"


def caption(title: str, setting: str, board: pd.DataFrame, seeds: int, protocol: str) -> str:
    """What a leaderboard shows and how it was tested: seeds, protocol, ranking, the test and its correction."""
    metrics = list(dict.fromkeys(board.metric))
    baseline = board.baseline.iloc[0]
    tests = board[board.p.notna()].groupby("metric", sort=False).size().reindex(metrics, fill_value=0)
    m = f"m = {tests.iloc[0]}" if tests.nunique() == 1 else ", ".join(f"{k}: m = {v}" for k, v in tests.items())
    direction = "higher" if higher_is_better(metrics[0]) else "lower"
    return (
        f"{title}. Mean ± sample std over {seeds} seeds ({protocol}-round protocol), {setting}. Rank: per regime by "
        f"{metrics[0]} ({direction} is better; '{ALL}': the mean rank). In brackets: the mean paired difference to "
        f"{baseline} over the seeds where both converged; * significant at α = {ALPHA} by a two-sided paired t-test "
        f"over seeds (the same seed is the same partition draw and initialisation; '{ALL}': over every (regime, seed) "
        f"pair), p-values Holm-corrected over the comparisons of each metric ({m}: every method but {baseline}, in "
        "every regime and over all regimes). Diverged seeds are never averaged in nor paired; their row says so. "
        "The CSV has every number (t, p, adjusted p)."
    )


def write_leaderboard(board: pd.DataFrame, out_prefix, caption_text: str) -> None:
    """``<prefix>.csv``: every number (``leaderboard``'s long form); ``.md``, ``.html``: ``matrix`` (the first
    metric at a glance), then ``layout`` (every metric, per regime by rank)."""
    metric = board.metric.iloc[0]
    glance = (
        f"{metric} at a glance: mean over seeds, in brackets the mean paired difference to the baseline, * significant "
        "after Holm; p Holm: the comparison over all regimes"
    )
    write_frame(layout(board), out_prefix, caption_text, csv_frame=board, before=(glance, matrix(board)))
