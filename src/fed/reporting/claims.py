"""A paper's headline statements as testable comparisons over our cells, each *supported*, *contradicted* or
*inconclusive* by a stated test over seeds — Welch's t-test (one-sided, α = 0.05) from the means, sample stds and
seed counts of the tables — with the numbers beside it.

Kinds (``claims.<name>.kind`` in a paper's config):
- ``best_method``: in every (dataset, partition) of a table, the best of ``methods`` beats every other method of
  the table on ``metric`` (``higher_is_better``). Supported: significantly better everywhere; contradicted: some
  other method significantly better somewhere; else inconclusive.
- ``trend``: in a figure's CSV, ``metric`` falls (or rises, ``decreasing: false``) as ``x`` grows: supported when
  the change from the smallest to the largest x has the stated sign significantly (Welch's t), contradicted when
  the opposite sign is significant. On a table, ``x_values`` maps its methods to x (Table 4's ε0 per method), per
  dataset and partition.
``datasets`` / ``partitions`` restrict a claim; ``exclude`` drops methods from ``best_method``'s rivals (an upper
bound such as centralized training is not a rival); ``rivals`` (``best_method``, ``margin_count``; default: the
methods of the paper's own config, ``fed.config.with_rivals``) keeps a method a user adds to the table out of them.
- ``no_gain``: like ``trend``, but the claim is that ``metric`` does *not* gain more than ``margin`` from the smallest
  to the largest x (FedDPMS: "more preliminary rounds are not needed"). Supported: the gain is significantly below
  the margin (Welch's t against mean + margin); contradicted: significantly above it.
- ``small_loss``: the converse margin: ``metric`` loses at most ``margin`` from the smallest to the largest x (FLea:
  "dCor lowers reconstruction quality at little accuracy cost"). Supported: the loss is significantly below the
  margin; contradicted: significantly above it.
- ``gap_trend``: in a figure's CSV (one row per seed, ``x`` and ``line`` columns), the gap between the best of
  ``methods`` and the best other line narrows as ``x`` grows: per seed, candidate − rival at the smallest and the
  largest x (the rival: the best other line there by mean), Welch's t on the two sets of gaps.
- ``correlation``: in a figure's CSV, ``metric`` rises with ``x`` across its rows (e.g. Fig. 3's classes): Spearman's
  rank correlation per dataset, one-sided; supported when significantly positive, contradicted when
  significantly negative.
- ``margin_count``: the best of ``methods`` beats the best other method by more than ``margin`` (relative, e.g. 0.05
  for "> 5 %") in at least a ``fraction`` of the (dataset, partition) cells (FLea: 13 of 18). Per cell, Welch's t of
  candidate against (1 + margin) × rival; supported when the significant cells reach the fraction, contradicted
  when the cells significantly below the margin leave too few to reach it.

``source`` may name several tables (a list): their rows are read together (FLea's Table 1 is six of ours), each
table's cells apart; ``pool_sources`` makes one cell of a dataset and partition across them, so that a candidate of
one table meets the rivals of another (FedDPMS at β = 0.1; a run listed in two tables is the same row twice).
"""

from __future__ import annotations

import math

import pandas as pd  # scipy.stats is imported in the functions that test (≈ 1 s; the workflow imports this)

ALPHA = 0.05
SUPPORTED, CONTRADICTED, INCONCLUSIVE = "supported", "contradicted", "inconclusive"
NOT_RUN = "not evaluated (no comparable runs)"


def better(m1: float, s1: float, n1: int, m2: float, s2: float, n2: int, higher: bool = True) -> float:
    """One-sided p-value of "1 is better than 2" (Welch); NaN with fewer than 2 seeds on either side."""
    from scipy import stats

    if n1 < 2 or n2 < 2 or not all(map(math.isfinite, (m1, s1, m2, s2))):
        return math.nan
    if s1 == 0 and s2 == 0:
        return 0.0 if (m1 > m2) == higher and m1 != m2 else 1.0
    alternative = "greater" if higher else "less"
    return float(stats.ttest_ind_from_stats(m1, s1, n1, m2, s2, n2, equal_var=False, alternative=alternative).pvalue)


def _p(p: float) -> str:
    """A test's p-value as the evidence gives it; where ``better`` could not test (a side with fewer than 2 seeds),
    says so."""
    return f"p={p:.3g}" if math.isfinite(p) else "no test: fewer than 2 seeds"


def _cells(rows: pd.DataFrame):
    """(label, rows) per table cell: (dataset, partition), and the source table when several are read together
    (FLea's two scarcity blocks share datasets and partitions)."""
    keys = ["source", "dataset", "partition"] if "source" in rows.columns else ["dataset", "partition"]
    for key, g in rows.groupby(keys, sort=False):
        yield "/".join(map(str, key[-2:])) + (f" ({key[0]})" if len(key) == 3 else ""), g


def _contenders(rows: pd.DataFrame, claim: dict) -> pd.DataFrame:
    """The candidates and their rivals: ``rivals`` where given (the paper's methods), less ``exclude``."""
    if "rivals" in claim:
        rows = rows[rows.method.isin([*claim["methods"], *claim["rivals"]])]
    return rows[~rows.method.isin(claim.get("exclude", []))]


def best_method(table: pd.DataFrame, claim: dict) -> dict:
    higher = claim.get("higher_is_better", True)
    rows = _contenders(_select(table[table.metric == claim["metric"]], claim), claim)
    evidence, outcomes = [], []
    for cell, g in _cells(rows):
        g = g[g.seeds > 0]
        cand, other = g[g.method.isin(claim["methods"])], g[~g.method.isin(claim["methods"])]
        if cand.empty or other.empty:
            continue
        best = cand.loc[cand.ours_mean.idxmax() if higher else cand.ours_mean.idxmin()]
        rival = other.loc[other.ours_mean.idxmax() if higher else other.ours_mean.idxmin()]
        p_win = better(best.ours_mean, best.ours_std, best.seeds, rival.ours_mean, rival.ours_std, rival.seeds, higher)
        p_lose = better(rival.ours_mean, rival.ours_std, rival.seeds, best.ours_mean, best.ours_std, best.seeds, higher)
        outcomes.append(SUPPORTED if p_win < ALPHA else CONTRADICTED if p_lose < ALPHA else INCONCLUSIVE)
        evidence.append(
            f"{cell}: {best.method} {best.ours_mean:.2f} vs {rival.method} {rival.ours_mean:.2f} ({_p(p_win)})"
        )
    return _combine(outcomes, evidence)


def _select(rows: pd.DataFrame, claim: dict) -> pd.DataFrame:
    for key, column in (("datasets", "dataset"), ("partitions", "partition")):
        if key in claim:
            rows = rows[rows[column].isin(claim[key])]
    return rows


def _trend_groups(df: pd.DataFrame, claim: dict) -> list[tuple[str, pd.DataFrame]]:
    """(label, mean/std/count of ``metric`` per x, sorted by x) per dataset and partition (tables) or dataset and
    attacked round (figure CSVs; FLea Fig. 9c's ``rounds``)."""
    x, metric = claim["x"], claim["metric"]
    if "x_values" in claim:  # a table's methods as points of x (e.g. Table 4's ε0 per method), per dataset/partition
        rows = _select(df[(df.metric == metric) & df.method.isin(claim["x_values"])], claim)
        rows = rows[rows.seeds > 0].assign(**{x: lambda r: r.method.map(claim["x_values"]).astype(float)})
        stats = rows.rename(columns={"ours_mean": "mean", "ours_std": "std", "seeds": "count"})
        groups = [
            (f"{d}/{p}", g.set_index(x)[["mean", "std", "count"]].sort_index())
            for (d, p), g in stats.groupby(["dataset", "partition"], sort=False)
        ]
    else:  # a figure's CSV: one row per seed (and attacked round, where it has them: a group each)
        df = _select(df[~df.get("diverged", pd.Series(False, index=df.index)).astype(bool)], claim)
        rounds = df["round"] if "round" in df and df["round"].notna().any() else pd.Series(0, index=df.index)
        cell = list(dict.fromkeys(c for c in ("dataset", "partition", "method", x, "seed") if c in df))
        if rounds.nunique() > 1 and "seed" in df and (df.groupby(cell)[metric].nunique(dropna=False) <= 1).all():
            # the metric is the cell's (its final accuracy), the same at every attacked round: a row per seed
            df = df.drop_duplicates(cell)
            rounds = pd.Series(0, index=df.index)
        groups = [
            (f"{d}, round {r:g}" if r else d, g.groupby(x)[metric].agg(["mean", "std", "count"]).sort_index())
            for (d, r), g in df.groupby([df.dataset, rounds.fillna(0)], sort=False)
        ]
    return [(label, agg) for label, agg in groups if len(agg) >= 2]


def trend(df: pd.DataFrame, claim: dict) -> dict:
    # decreasing in x: the value at the smallest x is higher than at the largest, and vice versa
    return _compare_ends(df, claim, shift=0.0, higher=claim.get("decreasing", True))


def no_gain(df: pd.DataFrame, claim: dict) -> dict:
    # no gain: the value at the smallest x plus the margin is higher than at the largest
    return _compare_ends(df, claim, shift=claim["margin"], higher=True)


def small_loss(df: pd.DataFrame, claim: dict) -> dict:
    # small loss: the value at the smallest x minus the margin is lower than at the largest
    return _compare_ends(df, claim, shift=-claim["margin"], higher=False)


def _compare_ends(df: pd.DataFrame, claim: dict, shift: float, higher: bool) -> dict:
    """Per group, "value at the smallest x + ``shift`` is higher (``higher``) or lower than at the largest x"."""
    x, metric = claim["x"], claim["metric"]
    evidence, outcomes = [], []
    for label, agg in _trend_groups(df, claim):
        lo, hi = agg.iloc[0], agg.iloc[-1]
        first, last = (lo["mean"] + shift, lo["std"], int(lo["count"])), (hi["mean"], hi["std"], int(hi["count"]))
        p_claim = better(*first, *last, higher=higher)
        p_opposite = better(*first, *last, higher=not higher)
        outcomes.append(SUPPORTED if p_claim < ALPHA else CONTRADICTED if p_opposite < ALPHA else INCONCLUSIVE)
        gain = f", change {hi['mean'] - lo['mean']:+.2f} vs margin {shift:+g}" if "margin" in claim else ""
        evidence.append(
            f"{label}: {metric} at {x}={agg.index[0]:g} {lo['mean']:.2f} vs {x}={agg.index[-1]:g} "
            f"{hi['mean']:.2f}{gain} ({_p(p_claim)})"
        )
    return _combine(outcomes, evidence)


def gap_trend(df: pd.DataFrame, claim: dict) -> dict:
    metric = claim["metric"]
    df = _select(df[~df.diverged.astype(bool)], claim)
    evidence, outcomes = [], []
    for dataset, g in df.groupby("dataset", sort=False):
        xs = sorted(g.x.unique())
        if len(xs) < 2:
            continue
        gaps = {}
        for x in (xs[0], xs[-1]):
            at = g[g.x == x]
            means = at.groupby("line")[metric].mean()
            cand = means[means.index.isin(claim["methods"])]
            rivals = means[~means.index.isin(claim["methods"])]
            if cand.empty or rivals.empty:
                break
            per_seed = at.pivot_table(index="seed", columns="line", values=metric)
            gaps[x] = (per_seed[cand.idxmax()] - per_seed[rivals.idxmax()]).dropna()
        if len(gaps) < 2:
            continue
        small, large = gaps[xs[0]], gaps[xs[-1]]
        stat = [(s.mean(), s.std(), len(s)) for s in (small, large)]
        p_narrows = better(*stat[0], *stat[1])
        p_widens = better(*stat[1], *stat[0])
        outcomes.append(SUPPORTED if p_narrows < ALPHA else CONTRADICTED if p_widens < ALPHA else INCONCLUSIVE)
        evidence.append(
            f"{dataset}: gap to the best other method {small.mean():+.2f} at x={xs[0]:g} vs {large.mean():+.2f} at "
            f"x={xs[-1]:g} ({_p(p_narrows)})"
        )
    return _combine(outcomes, evidence)


def correlation(df: pd.DataFrame, claim: dict) -> dict:
    from scipy import stats

    x, metric = claim["x"], claim["metric"]
    evidence, outcomes = [], []
    for dataset, g in df.dropna(subset=[x, metric]).groupby("dataset", sort=False):
        if len(g) < 3 or g[x].nunique() < 2 or g[metric].nunique() < 2:
            continue
        rho = stats.spearmanr(g[x], g[metric])
        p_up = float(stats.spearmanr(g[x], g[metric], alternative="greater").pvalue)
        p_down = float(stats.spearmanr(g[x], g[metric], alternative="less").pvalue)
        outcomes.append(SUPPORTED if p_up < ALPHA else CONTRADICTED if p_down < ALPHA else INCONCLUSIVE)
        evidence.append(f"{dataset}: Spearman ρ({x}, {metric}) = {rho.statistic:.2f} over {len(g)} rows ({_p(p_up)})")
    return _combine(outcomes, evidence)


def margin_count(table: pd.DataFrame, claim: dict) -> dict:
    margin, need = claim["margin"], claim["fraction"]
    rows = _contenders(_select(table[table.metric == claim["metric"]], claim), claim)
    above = below = cells = 0
    evidence = []
    for cell, g in _cells(rows):
        g = g[g.seeds > 0]
        cand, other = g[g.method.isin(claim["methods"])], g[~g.method.isin(claim["methods"])]
        if cand.empty or other.empty:
            continue
        cells += 1
        best, rival = cand.loc[cand.ours_mean.idxmax()], other.loc[other.ours_mean.idxmax()]
        bar_m, bar_s = (1 + margin) * rival.ours_mean, (1 + margin) * rival.ours_std
        p_up = better(best.ours_mean, best.ours_std, best.seeds, bar_m, bar_s, rival.seeds)
        p_down = better(bar_m, bar_s, rival.seeds, best.ours_mean, best.ours_std, best.seeds)
        above, below = above + (p_up < ALPHA), below + (p_down < ALPHA)
        gain = best.ours_mean / rival.ours_mean - 1 if rival.ours_mean else math.nan
        evidence.append(f"{cell}: {best.method} {gain:+.1%} over {rival.method} ({_p(p_up)})")
    if not cells:
        return {"verdict": NOT_RUN, "evidence": ""}
    required = math.ceil(need * cells - 1e-9)
    verdict = SUPPORTED if above >= required else CONTRADICTED if cells - below < required else INCONCLUSIVE
    head = (
        f"{above} of {cells} cells significantly above +{margin:.0%} (needed: {required}); {below} significantly below"
    )
    return {"verdict": verdict, "evidence": "; ".join([head, *evidence])}


def _combine(outcomes: list[str], evidence: list[str]) -> dict:
    if not outcomes:
        verdict = NOT_RUN
    elif CONTRADICTED in outcomes:
        verdict = CONTRADICTED
    elif all(o == SUPPORTED for o in outcomes):
        verdict = SUPPORTED
    else:
        verdict = INCONCLUSIVE
    return {"verdict": verdict, "evidence": "; ".join(evidence)}


KINDS = {
    "best_method": best_method,
    "trend": trend,
    "no_gain": no_gain,
    "small_loss": small_loss,
    "gap_trend": gap_trend,
    "correlation": correlation,
    "margin_count": margin_count,
}


def claims_table(
    claims: dict[str, dict], frames: dict[str, pd.DataFrame], not_comparable: dict[str, str]
) -> pd.DataFrame:
    """One row per claim: its statement, test, verdict and evidence. ``frames``: the table or figure CSV each
    claim reads (by its ``source``); ``not_comparable``: source → why its runs do not follow the paper's
    protocol (then the claim is about our reduced setting, and the row says so)."""
    rows = []
    for name, claim in claims.items():
        sources = claim_sources(claim)
        frame = (  # several tables: a `source` column keeps their cells apart
            pd.concat([frames[s].assign(source=s) for s in sources], ignore_index=True)
            if len(sources) > 1
            else frames[sources[0]]
        )
        if claim.get("pool_sources") and len(sources) > 1:  # one cell per dataset and partition across the tables
            frame = frame.drop(columns="source")
        result = KINDS[claim["kind"]](frame, claim)
        note = "; ".join(dict.fromkeys(n for s in sources if (n := not_comparable.get(s, ""))))
        rows.append(
            {
                "claim": name,
                "statement": claim["statement"],
                "test": TESTS[claim["kind"]],
                "verdict": result["verdict"],
                "evidence": result["evidence"],
                "setting": f"not comparable ({note})" if note else "paper protocol",
            }
        )
    return pd.DataFrame(rows)


def claim_sources(claim: dict) -> list[str]:
    """The table or figure names a claim reads (``source``: one name or a list)."""
    return [claim["source"]] if isinstance(claim["source"], str) else list(claim["source"])


TESTS = {
    "best_method": "best candidate vs best other method per dataset/partition, Welch's t one-sided, α = 0.05",
    "trend": "metric at the smallest vs the largest x, Welch's t one-sided, α = 0.05",
    "no_gain": "gain from the smallest to the largest x against the margin, Welch's t one-sided, α = 0.05",
    "small_loss": "loss from the smallest to the largest x against the margin, Welch's t one-sided, α = 0.05",
    "gap_trend": "per-seed gap to the best other method, smallest vs largest x, Welch's t one-sided, α = 0.05",
    "correlation": "Spearman rank correlation of metric with x across rows, one-sided, α = 0.05",
    "margin_count": "best candidate vs (1 + margin) × best other method per cell, Welch's t one-sided, α = 0.05; "
    "count of significant cells against the stated fraction",
}
