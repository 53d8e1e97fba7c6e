"""The head-to-head's answer in one table (issue 27): per method, where it beats the baseline (the leaderboard's
paired tests over seeds, Holm-corrected), at what privacy price (the audited privacy ledger: the leakage of what left
the clients, the stated ε) and at what compute price (the audited cost table). Every entry is read from those tables;
nothing here tests or ranks anew."""

from __future__ import annotations

import math

import pandas as pd

from fed.reporting.leaderboard import ALL, difference

EPSILONS = ("epsilon_total", "epsilon_exact")  # DA-FL's ε0 + ε1 (Theorem 3); FedDPMS' composed releases
# what can leave a client besides its model (the privacy ledger's item kinds, fed.algorithms' ctx.share calls)
SHARED = (
    "raw_samples",
    "mean_batches",
    "synthetic_samples",
    "noisy_latent_means",
    "decoders",
    "features",
    "class_feature_statistics",
    "label_counts",
    "class_roles_to_server",
)


def _regimes(rows: pd.DataFrame, sign: int) -> str:
    """The regimes where the paired test is significant in direction ``sign`` (+1: better than the baseline)."""
    better = rows["diff"] * (1 if rows["higher_is_better"].iloc[0] else -1) * sign > 0
    hits = rows[rows["significant"].astype(bool) & better]
    return ", ".join(hits["regime"]) or "—"


def _epsilon(row: pd.Series) -> float | str:
    """The first stated ε of ``EPSILONS`` (a number at the table's 3 decimals: the column also holds "inf" and "—", so
    the table's rounding skips it), or —."""
    for key in EPSILONS:
        if key in row and not (isinstance(row[key], float) and math.isnan(row[key])):
            return round(row[key], 3) if isinstance(row[key], float) else row[key]
    return "—"


def answer_table(leaderboard: pd.DataFrame, costs: pd.DataFrame, privacy: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One row per method, in the leaderboard's order over all regimes (by mean rank): its mean rank and mean paired
    difference to the baseline in ``metric`` over all (regime, seed) pairs (``*``: significant after Holm), the
    regimes where it is significantly better or worse, and — averaged over the regimes — the leakage score of what it
    shares and of its model's inversion, its largest stated ε, the MB it shares beyond model updates, its wall time
    relative to the baseline's, the local steps of a run, the MB a client exchanges per round, its stages' seconds
    and its peak memory."""
    lb = leaderboard[leaderboard["metric"] == metric]
    overall = lb[lb["regime"] == ALL].sort_values("rank")
    per_regime = lb[lb["regime"] != ALL]
    rows = []
    for _, row in overall.iterrows():
        m = row["method"]
        mine = per_regime[per_regime["method"] == m]
        pc, cc = privacy[privacy["method"] == m], costs[costs["method"] == m]
        diff = "baseline" if row.get("note") == "baseline" else difference(row)
        rows.append(
            {
                "method": m,
                "mean rank": row["rank"],
                f"{metric} vs baseline (all regimes)": diff,
                "significantly better in": _regimes(mine, +1) if diff != "baseline" else "",
                "significantly worse in": _regimes(mine, -1) if diff != "baseline" else "",
                "shares": ", ".join(k for k in SHARED if k in pc and (pc[k].fillna(0) > 0).any()),
                "MB shared": pc["mb_shared"].mean(),
                "leakage": pc["leakage"].mean(),
                "inversion leakage": pc["inversion_leakage"].mean(),
                "ε": _epsilon(pc.iloc[0]) if len(pc) else "—",
                "time vs FedAvg": cc["relative_to_fedavg"].mean(),
                "local steps": cc["local_steps"].mean() if "local_steps" in cc else math.nan,
                "MB per client-round": cc["mb_per_client_round"].mean(),
                "stage s": cc["stage_seconds"].mean(),
                "peak MB": cc["peak_rss_mb"].max(),
            }
        )
    out = pd.DataFrame(rows)
    out["shares"] = out["shares"].replace("", "model updates only")
    if out["local steps"].isna().all():  # not recorded by older runs
        out = out.drop(columns="local steps")
    return out.round(3)
