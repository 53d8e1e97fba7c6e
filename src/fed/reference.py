"""Committed reference cells (``reference_dir``): the metrics of finished runs, from which tables and figures rebuild
without training. A committed cell stands for the current config only while it was run with the config's settings;
``stale_reasons`` says what differs, and the workflow then recomputes the cell instead of reading it."""

from __future__ import annotations

import math
from typing import Any

from fed.config import PROTOCOL_KEY

# settings that change no number of a cell: labels, where checkpoints go and how often, and which round a table
# reports (every metrics.json holds both the last and the best round); the device, the batched path and CUDA's
# kernel choice change rounding only, like the CPU (the cell records them: machine, batched_clients, deterministic)
NEUTRAL = {
    "note",
    "reduction",
    "checkpoint_every",
    "checkpoint_minutes",
    "device",
    "report",
    "vectorise",
    "deterministic",
}


def json_safe(value: Any) -> Any:
    """The value as metrics.json stores it (strict JSON): tuples as lists, NaN and infinities (a diverged run's
    metrics, an infinite ε) as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def stale_reasons(
    record: dict,
    config: dict,
    algorithm: str,
    method_params: dict,
    partition_spec: dict,
    defaults: dict | None = None,
    tune: dict | None = None,
) -> list[str]:
    """What differs between a committed cell's ``metrics.json`` record and the cell the config asks for: its FL
    settings (``FLConfig.to_dict()``; a setting the record predates counts as its default, ``defaults``), its method
    (algorithm, parameters) and its partition (scheme and parameters; cells exported before partitions were
    recorded are not checked on it). Empty: the cell is current."""
    reasons = []
    recorded = {**json_safe(defaults or {}), **json_safe(record.get("config", {}))}
    wanted = json_safe(config)
    method, tuning = record.get("method", {}), record.get("tuning")
    grid = {**tuning["tune"]["grid"], **tuning.get("after", {})} if tuning else {}  # tune.after: that tuning's too
    chosen = {k.removeprefix(PROTOCOL_KEY) for k in grid if k.startswith(PROTOCOL_KEY)}  # settings a tuning chose
    keys = (recorded.keys() | wanted.keys()) - NEUTRAL - chosen
    if changed := sorted(k for k in keys if recorded.get(k) != wanted.get(k)):
        reasons.append(f"settings {changed}")
    params = dict(method.get("params", {}))
    for key in grid:  # a tuned cell records the point it chose beside the configured parameters
        params.pop(key, None)
    if method.get("algorithm") != algorithm or json_safe(params) != json_safe(method_params):
        reasons.append("method parameters")
    if json_safe(tuning["tune"] if tuning else None) != json_safe(tune):
        reasons.append("tuning")
    if (part := record.get("partition")) is not None:
        spec = {k: v for k, v in partition_spec.items() if k != "scheme"}
        if part.get("scheme") != partition_spec.get("scheme") or json_safe(part.get("params")) != json_safe(spec):
            reasons.append("partition")
    return reasons
