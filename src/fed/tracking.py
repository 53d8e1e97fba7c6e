"""MLflow tracking: one experiment per paper, one run per cell.

The SQLite store must exist before training jobs fan out (concurrent first-time schema creation loses runs),
so :func:`init_store` is called once by the ``mlflow_init`` rule; each training job then follows its cell live
(:class:`LiveRun`), retrying while another process holds the SQLite write lock. With ``tracking_mode: batch`` the
training jobs only write their files and :func:`log_finished` logs the finished cells in one process (MLflow's
import and SQL store cost each job ≈ 2 s: a tenth of a short cell).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from fed import provenance

MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100


os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no usage reports from research jobs


def default_uri(results_dir: str | Path) -> str:
    """The embedded store, relative to the workflow's directory (jobs run there): the project stays movable."""
    return f"sqlite:///{Path(results_dir) / 'mlflow.db'}"


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def init_store(uri: str, experiments: list[str]) -> dict[str, str]:
    """Create the store (schema migrations run here, once) and the experiments; returns name -> id. A SQLite
    store is created under a file lock: two papers' init jobs may start together."""
    if uri.startswith("sqlite:///"):
        from filelock import FileLock

        db = Path(uri.removeprefix("sqlite:///"))
        db.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{db}.lock"):
            client = _client(uri)
            return {name: ensure_experiment(client, uri, name) for name in experiments}
    client = _client(uri)
    return {name: ensure_experiment(client, uri, name) for name in experiments}


def ensure_experiment(client, uri: str, name: str) -> str:
    """The experiment's id, creating it if needed. With a SQLite store its artifacts go to ``mlflow-artifacts/``
    beside the database file (MLflow's default, ``./mlruns`` of whatever directory a job runs in, would scatter
    them — also when a deleted store is recreated by a training job)."""
    exp = client.get_experiment_by_name(name)
    if exp:
        return exp.experiment_id
    location = None
    if uri.startswith("sqlite:///"):
        location = (Path(uri.removeprefix("sqlite:///")).parent / "mlflow-artifacts" / name).resolve().as_uri()
    return client.create_experiment(name, artifact_location=location)


def git_commit(cwd: str | Path = ".") -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True
        ).stdout.strip()
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


def retry(call, retries: int = 20):
    """Run ``call()``, retrying while another process holds SQLite's write lock."""
    for i in range(retries):
        try:
            return call()
        except Exception as err:  # sqlite "database is locked" surfaces as MlflowException/OperationalError
            if "locked" not in str(err).lower() or i == retries - 1:
                raise
            time.sleep(min(0.2 * 2**i, 5.0))
    raise AssertionError("unreachable")


def metrics_digest(text: str) -> str:
    """The tag ``fed.metrics_sha256`` of a cell's run: the digest of its ``metrics.json``, by which
    :func:`log_finished` knows a run (live or batch) that is already up to date."""
    return hashlib.sha256(text.encode()).hexdigest()


def _metrics(row: dict[str, Any], step: int, prefix: str = "") -> list:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return [
        Metric(f"{prefix}{k}", float(v), now, step)
        for k, v in row.items()
        if k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool)
    ]


def _log_batches(client, run_id: str, metrics: list) -> None:
    """``metrics`` in MLflow's batches of at most 1,000."""
    for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=metrics[i : i + MAX_METRICS_PER_BATCH])


def _nan_for_null(row: dict[str, Any]) -> dict[str, Any]:
    """A metrics.json row (strict JSON writes non-finite numbers as null) with NaN where a live run logged NaN."""
    return {k: math.nan if v is None else v for k, v in row.items()}


class LiveRun:
    """One MLflow run per cell identity, visible from the job's start.

    ``start(identity, resumed)``: a job that resumes a checkpoint continues the run of the same identity (the
    tag ``fed.identity``) — also one a kill left RUNNING; a job that starts from scratch replaces an earlier run
    of that identity (deleted, so re-executions never duplicate). Rounds are logged as they finish (step =
    round), a continued run's only after the last round it has (a resume from the checkpoint before an unreadable
    one, or from before a kill that came between a round's logging and its checkpoint, trains rounds again);
    ``finish`` logs the summary and artifacts and ends FINISHED, ``fail`` ends FAILED.
    """

    def __init__(self, uri: str, experiment: str, run_name: str, params: dict[str, Any], tags: dict[str, str]):
        self.uri, self.experiment, self.run_name, self.params, self.tags = uri, experiment, run_name, params, tags
        self.run_id: str | None = None
        self.logged = 0  # the last round the run has

    def start(self, identity: str, resumed: bool) -> str:
        from mlflow.entities import Param

        def attempt():
            client = _client(self.uri)
            exp_id = ensure_experiment(client, self.uri, self.experiment)
            old = client.search_runs([exp_id], filter_string=f"tags.`fed.identity` = '{identity}'")
            if resumed and old:
                rid = old[0].info.run_id
                client.update_run(rid, status="RUNNING")
                self.logged = max((m.step for m in client.get_metric_history(rid, "seconds")), default=0)
                return rid
            for run in old:
                client.delete_run(run.info.run_id)
            rid = client.create_run(
                exp_id, run_name=self.run_name, tags=self.tags | {"fed.identity": identity}
            ).info.run_id
            flat = [Param(k, v[:6000]) for k, v in flatten(self.params).items()]
            for i in range(0, len(flat), MAX_PARAMS_PER_BATCH):
                client.log_batch(rid, params=flat[i : i + MAX_PARAMS_PER_BATCH])
            return rid

        self.run_id = retry(attempt)
        return self.run_id

    def log_round(self, row: dict[str, Any]) -> None:
        if int(row["round"]) <= self.logged:  # trained again after a resume from an earlier checkpoint
            return
        retry(lambda: _client(self.uri).log_batch(self.run_id, metrics=_metrics(row, int(row["round"]))))

    def log_rounds(self, rows: list[dict[str, Any]]) -> None:
        """Many rounds at once (a finished cell)."""
        metrics = [m for row in rows for m in _metrics(row, int(row["round"]))]
        retry(lambda: _log_batches(_client(self.uri), self.run_id, metrics))

    def finish(self, summary: dict[str, Any], artifacts: list[str | Path], tags: dict[str, str] | None = None) -> None:
        metrics = []
        for prefix in ("last", "best"):
            metrics += _metrics(summary[prefix], int(summary[prefix].get("round", 0)), f"{prefix}_")
        metrics += _metrics({"wall_seconds": summary["wall_seconds"]}, 0)
        tags = {
            "diverged": str(summary["diverged"]).lower(),
            "device": summary["device"],
            "threads": str(summary.get("threads", "")),
            **{f"shared.{k}": str(v) for k, v in summary.get("shared", {}).items()},
            **provenance.tags(summary),  # where it ran: tags, never params (not the run's identity)
            **(tags or {}),
        }

        def attempt():
            client = _client(self.uri)
            _log_batches(client, self.run_id, metrics)
            for k, v in tags.items():
                client.set_tag(self.run_id, k, v)
            for path in artifacts:
                client.log_artifact(self.run_id, str(path))
            client.set_terminated(self.run_id, "FINISHED")

        retry(attempt)

    def fail(self) -> None:
        if self.run_id:
            retry(lambda: _client(self.uri).set_terminated(self.run_id, "FAILED"))


def log_run(
    uri: str,
    experiment: str,
    run_name: str,
    params: dict[str, Any],
    tags: dict[str, str],
    summary: dict[str, Any],
    artifacts: list[str | Path],
    identity: str | None = None,
) -> str:
    """Log a finished cell in one go (a run that was not followed live)."""
    run = LiveRun(uri, experiment, run_name, params, tags)
    run.start(identity or run_name, resumed=False)
    run.log_rounds(summary["history"])
    run.finish(summary, artifacts)
    return run.run_id


def run_params(cell: dict[str, Any]) -> dict[str, Any]:
    """A cell's MLflow params, from its record (``metrics.json``): the resolved preset, method, dataset, seed."""
    return {"preset": cell["config"], "method": cell["method"], "dataset": cell["dataset"], "seed": cell["seed"]}


def log_finished(uri: str, metrics_files: list[str | Path]) -> dict[str, str]:
    """Log finished cells that no job followed live (``tracking_mode: batch``), each from its ``metrics.json`` and
    the ``history.csv`` beside it: the run a :class:`LiveRun` leaves (params, tags, one step per round, last/best
    metrics, the two files as artifacts), under the experiment and tags the training job recorded. A cell whose
    identity already has a FINISHED run of the same ``metrics.json`` (tag ``fed.metrics_sha256``, which a live run
    sets too) is left as it is, so a re-run, or a switch from live to batch, logs only new or recomputed cells; a
    recomputed cell replaces its run. A non-finite metric (``null`` in the strict-JSON file) is logged as NaN, as a
    live run logs it. Returns {file: run id}."""
    client = _client(uri)
    logged = {}
    for path in map(Path, metrics_files):
        text = path.read_text()
        cell = json.loads(text)
        sha = metrics_digest(text)
        exp_id = ensure_experiment(client, uri, cell["tracking"]["experiment"])
        query = f"tags.`fed.identity` = '{cell['identity']}' and tags.`fed.metrics_sha256` = '{sha}'"
        same = [r for r in client.search_runs([exp_id], filter_string=query) if r.info.status == "FINISHED"]
        if same:
            logged[str(path)] = same[0].info.run_id
            continue
        summary = cell | {"history": list(map(_nan_for_null, cell["history"]))}
        summary |= {k: _nan_for_null(cell[k]) for k in ("last", "best")}
        logged[str(path)] = log_run(
            uri,
            cell["tracking"]["experiment"],
            cell["tracking"]["run_name"],
            run_params(cell),
            cell["tracking"]["tags"] | {"fed.metrics_sha256": sha},
            summary,
            [path, path.parent / "history.csv"],
            identity=cell["identity"],
        )
    return logged
