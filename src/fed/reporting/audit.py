"""The audited columns of the cost and privacy tables (``audit: true``; rule audit, ``fed.leakage``): bytes on the
wire, peak memory of the jobs, and the distance-to-closest-record leakage of what left the clients."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

KEYS = ["dataset", "partition", "method"]
# states a client exchanges with the server each round, in units of the model: SCAFFOLD sends its control variate
# with the model both ways (Karimireddy et al. 2020, Alg. 1: (Δy_i, Δc_i) up, (x, c) down)
EXCHANGED_STATES = {"scaffold": 2}
MB = 1e6


def _records(cells: list[dict]) -> list[tuple[dict, dict, dict]]:
    """(cell, its audit, its metrics record) per audited cell; ``cell["path"]`` is the audit, ``cell["metrics"]``
    the metrics.json."""
    return [(c, json.loads(Path(c["path"]).read_text()), json.loads(Path(c["metrics"]).read_text())) for c in cells]


def _mean_std(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Mean over seeds per (dataset, partition, method), with ``<col>_std`` beside each of ``columns``."""
    agg = {c: "mean" for c in df.columns if c not in KEYS + ["seed", "records"]}
    agg["records"] = "first"
    out = df.groupby(KEYS, sort=False).agg(agg)
    for c in columns:
        out.insert(out.columns.get_loc(c) + 1, f"{c}_std", df.groupby(KEYS, sort=False)[c].std())
    return out.reset_index()


AUDIT_DECIMALS = 3  # how the audited columns are printed


def audit_costs(cells: list[dict], decimals: int | None = AUDIT_DECIMALS) -> pd.DataFrame:
    """Per (dataset, partition, method), mean over seeds: MB a participating client exchanges with the server in a
    round (model down and up), MB every client shares once or over the run beyond its model (the privacy ledger's
    items), the train job's peak resident memory, and its preparatory stages' wall time and peak memory (the
    stages a cell reads, shared or not with other methods). Rounded to ``decimals`` (``None``: unrounded)."""
    rows = []
    for cell, audit, metrics in _records(cells):
        algorithm = metrics["method"]["algorithm"]
        stages = {k: v for k, v in audit.get("jobs", {}).items() if k.startswith("stage ")}
        shared = _shared_bytes(metrics.get("shared", {}), audit["item_bytes"])
        rows.append(
            {
                **{k: cell[k] for k in KEYS},
                "mb_per_client_round": 2 * EXCHANGED_STATES.get(algorithm, 1) * audit["model_bytes"] / MB,
                "mb_shared_per_client": shared / metrics["config"]["num_clients"] / MB,
                "peak_rss_mb": audit.get("jobs", {}).get("train", {}).get("max_rss_mb", math.nan),
                "stage_seconds": sum(s["seconds"] for s in stages.values()) if stages else 0.0,
                "stage_peak_rss_mb": max((s["max_rss_mb"] for s in stages.values()), default=math.nan),
            }
        )
    out = pd.DataFrame(rows).groupby(KEYS, sort=False).mean().reset_index()
    return out if decimals is None else out.round(decimals)


def _shared_bytes(ledger: dict, item_bytes: dict) -> float:
    """Bytes of every counted item of the ledger whose size the audit knows (guarantees are not items)."""
    return float(sum(v * item_bytes[k] for k, v in ledger.items() if k in item_bytes and isinstance(v, int | float)))


def audit_privacy(cells: list[dict], decimals: int | None = AUDIT_DECIMALS) -> pd.DataFrame:
    """Per (dataset, partition, method): MB shared over the run beyond the model updates; the record-like artifact
    audited (``records``), its leakage score (0: its artifacts find their client's training records closest no more
    often than chance, 1: raw records; ``fed.leakage``), how many distinct records are nearest to its artifacts (the
    score's sample size), its closer-to-train rate over those records and chance level, and the median distances to
    the closest training and held-out record; the leakage score of the inversion of the final model (what model
    updates give away) and its sample size. Since the per-class null (fed.membership): the leakage score's bootstrap
    interval and the old per-client score beside it; the membership advantage of a distance attack on the artifact
    and on the inversion, and of a loss attack on the clients' updates, with intervals (``_lo``, ``_hi``: the mean
    over seeds of each cell's interval), left out where every audit predates them. Mean and std over seeds, rounded
    to ``decimals`` (``None``: unrounded, for a display that rounds again, such as ``leakage_glance``)."""
    rows = []
    for cell, audit, metrics in _records(cells):
        arts = audit["artifacts"]
        own = [k for k in arts if k not in ("model_inversion", "client_updates")]
        art, inversion = arts[own[0]] if own else {}, arts.get("model_inversion", {})
        updates = arts.get("client_updates", {})
        rows.append(
            {
                **{k: cell[k] for k in KEYS},
                "seed": cell["seed"],
                "mb_shared": _shared_bytes(metrics.get("shared", {}), audit["item_bytes"]) / MB,
                "records": own[0] if own else "",
                "leakage": _num(art.get("leakage")),
                **_ci("leakage", art.get("leakage_ci")),
                "leakage_client": _num(art.get("leakage_client")),  # the old per-client null, beside the per-class one
                "nearest_records": _num(art.get("distinct_nearest")),  # the score's sample size (fed.leakage: hubs)
                "advantage": _num(art.get("advantage")),  # membership by distance to the closest artifact
                **_ci("advantage", art.get("advantage_ci")),
                "closer_to_train": _num(art.get("closer_to_train_distinct")),
                "chance": _num(art.get("chance")),
                "dcr_train": _num(art.get("dcr_train_median")),
                "dcr_holdout": _num(art.get("dcr_holdout_median")),
                "inversion_leakage": _num(inversion.get("leakage")),
                "inversion_nearest_records": _num(inversion.get("distinct_nearest")),
                "inversion_advantage": _num(inversion.get("advantage")),
                "update_advantage": _num(updates.get("advantage")),  # loss-threshold, on the clients' updates
                **_ci("update_advantage", updates.get("advantage_ci")),
            }
        )
    out = _mean_std(pd.DataFrame(rows), ["leakage", "advantage", "inversion_leakage", "update_advantage"])
    since_intervals = [c for c in out.columns if c.endswith(("_lo", "_hi", "advantage", "advantage_std", "_client"))]
    out = out.drop(columns=[c for c in since_intervals if out[c].isna().all()])  # no audit of the table has them
    out = out[KEYS + ["mb_shared", "records"] + [c for c in out.columns if c not in KEYS + ["mb_shared", "records"]]]
    return out if decimals is None else out.round(decimals)


def _ci(name: str, bounds: list[float] | None) -> dict[str, float]:
    """A cell's bootstrap interval as two columns (nan where the audit predates intervals); over seeds, their mean."""
    lo, hi = bounds or (None, None)
    return {f"{name}_lo": _num(lo), f"{name}_hi": _num(hi)}


def _num(v) -> float:
    return math.nan if v is None else float(v)


LEAKAGE_GLANCE = {  # column of the glance -> the privacy table's score
    "leakage [95 % CI]": "leakage",  # the shared artifact: distance to the closest record, per-class null
    "membership advantage [95 % CI]": "advantage",  # the shared artifact: paired membership test, 2·AUC − 1
    "update advantage [95 % CI]": "update_advantage",  # each client's update of one more round: a loss attack
    "inversion leakage": "inversion_leakage",  # ZSDG's inversion of the final global model
}


def leakage_glance(privacy: pd.DataFrame, partition: str, methods: list[str]) -> pd.DataFrame:
    """One regime's leakage, one row per method of ``methods`` (``audit_privacy``'s rows of ``partition``, unrounded:
    ``decimals=None``, or a mean of 0.5955 reads 0.59 through 0.595): what is attacked, and each attack's score, mean
    over seeds, with the mean over seeds of its cells' 95 % bootstrap interval in brackets; — where the method has no
    such artifact, and "nothing audited" where no attack has a score (its runs trained no round: nothing left the
    clients)."""

    def score(row: pd.Series, name: str) -> str:
        value, lo, hi = (row.get(k, math.nan) for k in (name, f"{name}_lo", f"{name}_hi"))
        if pd.isna(value):
            return "—"
        return f"{value:.2f}" + ("" if pd.isna(lo) else f" [{lo:.2f}, {hi:.2f}]")

    rows = privacy[privacy["partition"] == partition].set_index("method")
    out = []
    for m in methods:
        row = rows.loc[m] if m in rows.index else pd.Series(dtype=object)
        records, scores = row.get("records"), {column: score(row, name) for column, name in LEAKAGE_GLANCE.items()}
        if not (isinstance(records, str) and records):
            records = "model updates only" if set(scores.values()) != {"—"} else "nothing audited"
        out.append({"method": m, "artifact attacked": records, **scores})
    return pd.DataFrame(out)
