"""MLflow tracking: one experiment per paper, one run per cell.

The SQLite store must exist before training jobs fan out (concurrent first-time schema creation loses runs),
so :func:`init_store` is called once by the ``mlflow_init`` rule; :func:`log_run` then writes a finished cell
in a few batched calls, retrying while another process holds the SQLite write lock.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100


def default_uri(results_dir: str | Path) -> str:
    return f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def init_store(uri: str, experiments: list[str]) -> dict[str, str]:
    """Create the store (schema migrations run here, once) and the experiments; returns name -> id.

    With a SQLite store, artifacts go to ``mlflow-artifacts/`` beside the database file (MLflow's default,
    ``./mlruns`` of whatever directory a job runs in, would scatter them)."""
    client = _client(uri)
    artifact_root = Path(uri.removeprefix("sqlite:///")).parent / "mlflow-artifacts" if uri.startswith("sqlite:///") \
        else None
    ids = {}
    for name in experiments:
        exp = client.get_experiment_by_name(name)
        location = (artifact_root / name).resolve().as_uri() if artifact_root else None
        ids[name] = exp.experiment_id if exp else client.create_experiment(name, artifact_location=location)
    return ids


def git_commit(cwd: str | Path = ".") -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= flatten(v, key + ".")
        else:
            out[key] = json.dumps(v) if isinstance(v, (list, tuple)) else str(v)
    return out


def log_run(uri: str, experiment: str, run_name: str, params: dict[str, Any], tags: dict[str, str],
            summary: dict[str, Any], artifacts: list[str | Path], retries: int = 20) -> str:
    """Log one finished cell: params, tags, per-round metrics (step = round), final metrics, artifacts."""
    from mlflow.entities import Metric, Param

    now = int(time.time() * 1000)
    metrics = [Metric(k, float(v), now, int(row["round"])) for row in summary["history"] for k, v in row.items()
               if k != "round" and isinstance(v, (int, float))]
    for prefix in ("last", "best"):
        metrics += [Metric(f"{prefix}_{k}", float(v), now, int(summary[prefix].get("round", 0)))
                    for k, v in summary[prefix].items() if k != "round" and isinstance(v, (int, float))]
    metrics.append(Metric("wall_seconds", summary["wall_seconds"], now, 0))
    all_tags = tags | {"diverged": str(summary["diverged"]).lower(), "device": summary["device"]}
    flat = [Param(k, v[:6000]) for k, v in flatten(params).items()]

    def attempt() -> str:
        client = _client(uri)
        exp = client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
        rid = client.create_run(exp_id, run_name=run_name, tags=all_tags).info.run_id
        try:
            _fill(client, rid)
        except Exception:
            client.delete_run(rid)  # no half-logged duplicates when the retry succeeds
            raise
        return rid

    def _fill(client, rid: str) -> None:
        for i in range(0, len(flat), MAX_PARAMS_PER_BATCH):
            client.log_batch(rid, params=flat[i : i + MAX_PARAMS_PER_BATCH])
        for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            client.log_batch(rid, metrics=metrics[i : i + MAX_METRICS_PER_BATCH])
        for path in artifacts:
            client.log_artifact(rid, str(path))
        client.set_terminated(rid, "FINISHED")

    for i in range(retries):
        try:
            return attempt()
        except Exception as err:  # sqlite "database is locked" surfaces as MlflowException/OperationalError
            if "locked" not in str(err).lower() or i == retries - 1:
                raise
            time.sleep(min(0.2 * 2**i, 5.0))
    raise AssertionError("unreachable")

