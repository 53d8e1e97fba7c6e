"""The head-to-head's analyses, named in advance (docs/headtohead-protocol.md, section 5).

Input: one metric's values x_{m,r,s} for method m, regime r and seed s (a seed whose run diverged has none) and a
baseline b. Per method m ≠ b, the paired differences d_{r,s} = x_{m,r,s} − x_{b,r,s} over the seeds where both have a
value (negated for a lower-is-better metric, so that d > 0 always means better than the baseline):

- ``primary``: the mixed model d_{r,s} = δ + u_r + e_{r,s} with a random regime effect. Balanced (every regime with
  the same seeds), its REML estimate of δ is the mean of the regime means d̄_r and its test is Student's t of the
  d̄_r against 0 with R − 1 degrees of freedom; that t is what is computed (also when a diverged seed unbalances a
  regime: then it is the regime-means analysis, a conservative stand-in). 95 % interval: δ ± t_{.975, R−1}·sd(d̄_r)/√R.
- ``pooled_t``: Student's paired t over every (regime, seed) pair (regimes treated as seeds: the old board's test).
- ``wilcoxon``: Wilcoxon's signed-rank test over the same pairs (``scipy.stats.wilcoxon``, two-sided).
- ``friedman``: Friedman's test over the (regime, seed) blocks where every method has a value, and Nemenyi's critical
  difference CD = q_α √(k(k+1)/(6N)) (q_α: the studentized range's 1 − α quantile for k methods, / √2); m differs
  from b when its mean rank differs from b's by more than CD. The p column holds Friedman's omnibus p.
- ``regime:<r>``: per regime, Student's paired t over its seeds.

Holm's correction (``fed.reporting.leaderboard.holm``) runs within each family: one per analysis, and one per
regime, over the methods compared. ``survives`` marks a method whose direction is significant under the primary
analysis and under each of pooled_t, wilcoxon and friedman.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd  # scipy.stats is imported in the functions that test (≈ 1 s; the workflow imports this)

from fed.reporting.leaderboard import ALPHA, holm, paired_t

EVERY = ("primary", "pooled_t", "wilcoxon", "friedman")  # the analyses a conclusion must survive
COLUMNS = ["analysis", "method", "diff", "low", "high", "n", "statistic", "p", "p_holm", "significant"]


def differences(values: pd.DataFrame, baseline: str, higher_is_better: bool = True) -> pd.DataFrame:
    """``values``: columns method, regime, seed, value. The paired d_{r,s} of every method against ``baseline``:
    columns method, regime, seed, d (better than the baseline: d > 0)."""
    wide = values.pivot_table(index=["regime", "seed"], columns="method", values="value", aggfunc="first")
    sign = 1.0 if higher_is_better else -1.0
    out = []
    for method in wide.columns:
        if method == baseline:
            continue
        d = (sign * (wide[method] - wide[baseline])).dropna()
        out.append(d.rename("d").reset_index().assign(method=method))
    columns = ["method", "regime", "seed", "d"]
    return pd.concat(out, ignore_index=True)[columns] if out else pd.DataFrame(columns=columns)  # all diverged


def regime_means_t(d: pd.DataFrame) -> dict:
    """The primary analysis of one method's differences (columns regime, d)."""
    from scipy import stats

    means = d.groupby("regime")["d"].mean().to_numpy()
    r, delta = len(means), float(np.mean(means)) if len(means) else math.nan
    if r < 2:
        return {"diff": delta, "low": math.nan, "high": math.nan, "n": r, "statistic": math.nan, "p": math.nan}
    t, p = paired_t(means, np.zeros(r))
    half = stats.t.ppf(0.975, r - 1) * np.std(means, ddof=1) / math.sqrt(r)
    return {"diff": delta, "low": delta - half, "high": delta + half, "n": r, "statistic": t, "p": p}


def pooled(d: pd.DataFrame) -> dict:
    x = d["d"].to_numpy()
    t, p = paired_t(x, np.zeros(len(x)))
    return {"diff": float(np.mean(x)) if len(x) else math.nan, "n": len(x), "statistic": t, "p": p}


def signed_rank(d: pd.DataFrame) -> dict:
    from scipy import stats

    x = d["d"].to_numpy()
    if len(x) < 2 or np.all(x == 0):
        return {"diff": float(np.mean(x)) if len(x) else math.nan, "n": len(x), "statistic": math.nan, "p": math.nan}
    result = stats.wilcoxon(x)
    return {"diff": float(np.mean(x)), "n": len(x), "statistic": float(result.statistic), "p": float(result.pvalue)}


def friedman_nemenyi(values: pd.DataFrame, baseline: str, higher_is_better: bool = True) -> pd.DataFrame:
    """Mean ranks over the complete (regime, seed) blocks (rank 1 = best), Friedman's p and Nemenyi's CD: one row a
    method ≠ baseline with diff = the baseline's mean rank − its own (> 0: better), significant when |diff| > CD."""
    from scipy import stats

    wide = values.pivot_table(index=["regime", "seed"], columns="method", values="value", aggfunc="first").dropna()
    k, n = wide.shape[1], wide.shape[0]
    ranks = (-wide if higher_is_better else wide).rank(axis=1, method="average").mean()
    p = float(stats.friedmanchisquare(*wide.to_numpy().T).pvalue) if k >= 3 and n >= 2 else math.nan
    # no complete block (no regime and seed where every method has a value: runs that diverged): no ranks, no CD
    cd = (
        stats.studentized_range.ppf(1 - ALPHA, k, np.inf) / math.sqrt(2) * math.sqrt(k * (k + 1) / (6 * n))
        if n
        else math.nan
    )
    rows = []
    for method in wide.columns:
        if method != baseline:
            diff = float(ranks[baseline] - ranks[method])
            rows.append({"analysis": "friedman", "method": method, "diff": diff, "low": math.nan, "high": math.nan,
                         "n": n, "statistic": cd, "p": p, "p_holm": p,
                         "significant": bool(p < ALPHA and abs(diff) > cd)})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def analyse(values: pd.DataFrame, baseline: str, higher_is_better: bool = True) -> pd.DataFrame:
    """Every analysis of the protocol, one row per (analysis, method): diff (> 0: better than the baseline; ranks
    for friedman), its 95 % interval (primary), n (regimes, pairs or blocks), statistic (t, W, or Nemenyi's CD),
    p, Holm's p within the analysis' family, significant."""
    d = differences(values, baseline, higher_is_better)
    rows = []
    for method, dm in d.groupby("method", sort=False):
        rows.append({"analysis": "primary", "method": method} | regime_means_t(dm))
        rows.append({"analysis": "pooled_t", "method": method} | pooled(dm))
        rows.append({"analysis": "wilcoxon", "method": method} | signed_rank(dm))
        for regime, dr in dm.groupby("regime", sort=False):
            rows.append({"analysis": f"regime:{regime}", "method": method} | pooled(dr))
    out = pd.DataFrame(rows).reindex(columns=COLUMNS)
    for idx in out.groupby("analysis").groups.values():  # Holm within each family
        out.loc[idx, "p_holm"] = holm(out.loc[idx, "p"])
    out["significant"] = out["p_holm"] < ALPHA
    out = pd.concat([out, friedman_nemenyi(values, baseline, higher_is_better)], ignore_index=True)
    return out


def survivors(analysed: pd.DataFrame) -> pd.DataFrame:
    """Per method: the direction (+1 better, −1 worse than the baseline, 0 not significant) under each analysis of
    ``EVERY``, and ``survives``: significant in the same direction under all of them."""
    rows = []
    for method, a in analysed[analysed["analysis"].isin(EVERY)].groupby("method", sort=False):
        direction = {r.analysis: int(np.sign(r.diff)) if r.significant else 0 for r in a.itertuples()}
        signs = {direction.get(name, 0) for name in EVERY}
        rows.append({"method": method, **direction, "survives": len(signs) == 1 and 0 not in signs})
    return pd.DataFrame(rows, columns=["method", *EVERY, "survives"])


def board_values(runs: pd.DataFrame, metric: str, protocol: str) -> pd.DataFrame:
    """``collect_runs``' rows of a leaderboard's cells as ``analyse`` reads them: method, regime, seed, value of
    ``metric`` at the ``protocol``'s round; a diverged run has no value."""
    from fed.reporting.leaderboard import regime_label, seed_values

    x = seed_values(runs, metric, protocol).dropna(subset=["value"])
    several = x["dataset"].nunique() > 1
    x["regime"] = [regime_label(d, p, several) for d, p in zip(x["dataset"], x["partition"])]
    return x[["method", "regime", "seed", "value"]]


def table_runs(grid, table: str) -> tuple[pd.DataFrame, dict, str]:
    """A configured leaderboard's runs (``collect_runs``: committed cells where current, else results_dir's), its
    spec and the preset's reporting protocol: the input of ``board_analyses``, as the ``analyses`` rule gives it."""
    from fed.reporting.tables import collect_runs

    spec = grid.config["tables"][table]
    cells = [dict(c, path=grid.cell_path(**c)) for c in grid.table_cells(spec)]
    if missing := [c["path"] for c in cells if not Path(c["path"]).is_file()]:
        raise ValueError(
            f"table {table!r}: {len(missing)} of its {len(cells)} cells are neither committed (current) nor under "
            f"results/, e.g. {missing[0]}: run them first (fed campaign / snakemake), or narrow the table's config"
        )
    return collect_runs(cells), spec, grid.preset(spec["preset"])["report"]


def board_analyses(runs: pd.DataFrame, table: dict, protocol: str) -> tuple[pd.DataFrame, list]:
    """A leaderboard's analyses, every metric: the CSV frame (every analysis, p and statistic; ``against``: the
    baseline) and the titled glance tables of the md, one a metric, then one a ``contrasts`` entry (method: the method
    it is tested against, e.g. FedData against the step-matched FedAvg: one pre-registered comparison, its own family
    of one, so Holm leaves its p as it is)."""
    from fed.reporting.leaderboard import DEFAULT_BASELINE, higher_is_better

    baseline = table.get("baseline", DEFAULT_BASELINE)
    frames, glances = [], []
    for metric in table["metrics"]:
        values, higher = board_values(runs, metric, protocol), higher_is_better(metric)
        analysed = analyse(values, baseline, higher)
        frames.append(analysed.assign(metric=metric, against=baseline))
        glances.append((metric, glance(analysed, [m for m in table["methods"] if m != baseline])))
        for method, against in table.get("contrasts", {}).items():
            pair = analyse(values[values["method"].isin([method, against])], against, higher)
            frames.append(pair.assign(metric=metric, against=against))
            glances.append((f"{metric}: {method} against {against}", glance(pair, [method])))
    return pd.concat(frames, ignore_index=True), glances


def _word(row) -> str:
    """better / worse than the baseline, or — (not significant)."""
    return ("better" if row["diff"] > 0 else "worse") if row["significant"] else "—"


def _verdict(row) -> str:
    """The word, with Holm's p."""
    return "n/a" if pd.isna(row["p_holm"]) else f"{_word(row)} ({row['p_holm']:.2g})"


CAPTION = (
    "{title} — its analyses, named in advance (docs/headtohead-protocol.md, section 5): per method, δ = the mean over"
    " regimes of its mean paired difference to {baseline} (> 0: better; a regime's seeds where both have a value),"
    " the primary test (a random regime effect: Student's t of the regime means, 95 % interval) with Holm over the"
    " methods; the secondary ones (the pooled paired t and Wilcoxon's signed-rank test over every (regime, seed) pair,"
    " Friedman's test with Nemenyi's critical difference over the complete blocks: the gain in mean rank over"
    " {baseline}), each Holm-corrected in its own family; 'all four': significant in the same direction under every"
    " one; the regimes where the paired t over seeds is significant (Holm within each regime). A run that diverged"
    " has no value and is never paired. Every analysis, p and statistic: the CSV."
)


def glance(analysed: pd.DataFrame, methods: list[str] = ()) -> pd.DataFrame:
    """One row per method (by the primary estimate, best first; then those of ``methods`` with no paired value,
    every run diverged, in a row that says so): the primary estimate δ with its 95 % interval and Holm's p, each
    secondary analysis' verdict (better / worse / —, Holm's p; Friedman: the gain in mean rank over the baseline,
    Nemenyi's CD in the header, n/a for two methods), whether the conclusion holds under all four (``survivors``),
    and the regimes where the per-regime t is significant after Holm (+ better, − worse)."""
    by = {name: a.set_index("method") for name, a in analysed.groupby("analysis")}
    primary = by.get("primary", pd.DataFrame(columns=COLUMNS).set_index("method"))  # none: every run diverged
    order = list(primary.sort_values("diff", ascending=False).index)
    order += [m for m in methods if m not in order]
    fried = by.get("friedman", pd.DataFrame())
    complete = len(fried) and fried["n"].iloc[0]
    cd = f"CD {fried['statistic'].iloc[0]:.2f} over {fried['n'].iloc[0]} blocks" if complete else "no complete block"
    kept = survivors(analysed).set_index("method")
    regimes = analysed[analysed["analysis"].str.startswith("regime:")]
    rows = []
    for m in order:
        if m not in primary.index:
            rows.append({"method": m, "δ": "no value (every run diverged)"})
            continue
        p = primary.loc[m]
        hits = regimes[(regimes["method"] == m) & regimes["significant"].astype(bool)]
        f = fried.loc[m] if m in fried.index else None
        rows.append(
            {
                "method": m,
                "δ": f"{p['diff']:+.2f}",
                "primary: 95 % interval; Holm p": "n/a (one regime)"
                if pd.isna(p["p_holm"])
                else f"{p['low']:+.2f} to {p['high']:+.2f}; "
                + (f"**{p['p_holm']:.2g}**" if p["significant"] else f"{p['p_holm']:.2g}"),
                "pooled t": _verdict(by["pooled_t"].loc[m]),
                "Wilcoxon": _verdict(by["wilcoxon"].loc[m]),
                f"Friedman–Nemenyi ({cd})": "n/a"  # no complete block, or two methods (Friedman needs three)
                if f is None or pd.isna(f["p"])
                else f"{_word(f)} ({f['diff']:+.2f})",  # at the CD's decimals: 0.355 < CD 0.36 never reads +0.4
                "all four": {1: "better", -1: "worse"}.get(
                    int(np.sign(p["diff"])) if kept.loc[m, "survives"] else 0, "—"
                ),
                "regimes (t over seeds, Holm)": ", ".join(
                    f"{r.analysis.removeprefix('regime:')} {'+' if r.diff > 0 else '−'}" for r in hits.itertuples()
                )
                or "—",
            }
        )
    return pd.DataFrame(rows).fillna("")
