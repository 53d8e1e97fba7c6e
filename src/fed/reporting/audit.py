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


def audit_costs(cells: list[dict]) -> pd.DataFrame:
    """Per (dataset, partition, method), mean over seeds: MB a participating client exchanges with the server in a
    round (model down and up), MB every client shares once or over the run beyond its model (the privacy ledger's
    items), the train job's peak resident memory, and its preparatory stages' wall time and peak memory (the
    stages a cell reads, shared or not with other methods)."""
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
                "peak_rss_mb": audit["jobs"]["train"]["max_rss_mb"] if "jobs" in audit else math.nan,
                "stage_seconds": sum(s["seconds"] for s in stages.values()) if stages else 0.0,
                "stage_peak_rss_mb": max((s["max_rss_mb"] for s in stages.values()), default=math.nan),
            }
        )
    return pd.DataFrame(rows).groupby(KEYS, sort=False).mean().reset_index().round(3)


def _shared_bytes(ledger: dict, item_bytes: dict) -> float:
    """Bytes of every counted item of the ledger whose size the audit knows (guarantees are not items)."""
    return float(sum(v * item_bytes[k] for k, v in ledger.items() if k in item_bytes and isinstance(v, int | float)))


def audit_privacy(cells: list[dict]) -> pd.DataFrame:
    """Per (dataset, partition, method): MB shared over the run beyond the model updates; the record-like artifact
    audited (``records``), its leakage score (0: its artifacts find their client's training records closest no more
    often than chance, 1: raw records; ``fed.leakage``), how many distinct records are nearest to its artifacts (the
    score's sample size), its closer-to-train rate over those records and chance level, and the median distances to
    the closest training and held-out record; the leakage score of the inversion of the final model (what model
    updates give away) and its sample size. Mean and std over seeds."""
    rows = []
    for cell, audit, metrics in _records(cells):
        arts = audit["artifacts"]
        own = [k for k in arts if k != "model_inversion"]
        art, inversion = arts[own[0]] if own else {}, arts.get("model_inversion", {})
        rows.append(
            {
                **{k: cell[k] for k in KEYS},
                "seed": cell["seed"],
                "mb_shared": _shared_bytes(metrics.get("shared", {}), audit["item_bytes"]) / MB,
                "records": own[0] if own else "",
                "leakage": _num(art.get("leakage")),
                "nearest_records": _num(art.get("distinct_nearest")),  # the score's sample size (fed.leakage: hubs)
                "closer_to_train": _num(art.get("closer_to_train_distinct")),
                "chance": _num(art.get("chance")),
                "dcr_train": _num(art.get("dcr_train_median")),
                "dcr_holdout": _num(art.get("dcr_holdout_median")),
                "inversion_leakage": _num(inversion.get("leakage")),
                "inversion_nearest_records": _num(inversion.get("distinct_nearest")),
            }
        )
    out = _mean_std(pd.DataFrame(rows), ["leakage", "inversion_leakage"])
    return out[
        KEYS + ["mb_shared", "records"] + [c for c in out.columns if c not in KEYS + ["mb_shared", "records"]]
    ].round(3)


def _num(v) -> float:
    return math.nan if v is None else float(v)
