"""Run one cell (preset × dataset × partition × method × seed): the function behind the ``train`` rule and
``fed run``. Writes ``metrics.json`` and ``history.csv`` to ``out_dir`` and logs the run to MLflow."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
import torch

from fed.algorithms import build_algorithm
from fed.config import FLConfig, MethodSpec
from fed.data.datasets import load_dataset
from fed.engine import Engine, resolve_device
from fed.stages import Stage


def make_engine(
    cfg: FLConfig,
    method: MethodSpec,
    dataset: str,
    data_root: str | Path,
    partition_file: str | Path,
    seed: int,
    threads: int = 1,
    **engine_kwargs,
) -> Engine:
    torch.set_num_threads(threads)
    if resolve_device(cfg.device).type == "cuda":
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    train = load_dataset(dataset, data_root, "train")
    test = load_dataset(dataset, data_root, "test")
    try:
        partition = json.loads(Path(partition_file).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(
            f"partition file {partition_file} is not valid JSON ({err}); delete it and rerun, Snakemake recomputes it"
        ) from None
    return Engine(
        cfg,
        build_algorithm(method.algorithm, **method.params),
        train,
        test,
        partition,
        seed,
        label=cell_label(dataset, partition_file, method, seed),
        **engine_kwargs,
    )


def cell_label(dataset: str, partition_file: str | Path, method: MethodSpec, seed: int) -> str:
    return f"{dataset}/{Path(partition_file).parent.name}/{method.name}/seed{seed}"


@dataclass
class StageJob:
    """One stage to run: what it is, on which dataset, where its file goes, the lower stage it continues from,
    and ``engine(method, rounds=None, **engine_kwargs)`` — an engine on the stage's data, partition, seed and work
    directory."""

    stage: Stage
    dataset: str
    out: Path
    lower: str | None
    engine: Callable[..., Engine]


def run_fedavg_prefix(job: StageJob) -> None:
    """FedAvg up to round r; its final checkpoint seeds every start-round run after it."""
    run = job.engine("fedavg", rounds=job.stage.param("rounds"), stages={"warm": job.lower} if job.lower else None)
    run.run()  # a diverged prefix still ends with its checkpoint, so the runs after it record the divergence
    shutil.copyfile(run.checkpoint_path, job.out)


def run_centralized_model(job: StageJob) -> None:
    """Centralized training for the preset's rounds; writes the model, its architecture and its last-round
    metrics (an oracle is a result too: its test accuracy goes beside the figure that uses it)."""
    run = job.engine("centralized")
    summary = run.run()
    record = {
        "state": run.global_state,
        "model": run.cfg.model,
        "dataset": job.dataset,
        "diverged": summary["diverged"],
        "last": _json_safe(summary["last"]),
    }
    torch.save(record, job.out)


STAGE_RUNNERS: dict[str, Callable[[StageJob], None]] = {
    "fedavg_prefix": run_fedavg_prefix,
    "centralized_model": run_centralized_model,
}


def run_stage(
    stage: Stage,
    cfg: FLConfig,
    dataset: str,
    data_root: str | Path,
    partition_file: str | Path,
    seed: int,
    out: str | Path,
    work_dir: str | Path,
    lower: str | None = None,
    threads: int = 1,
    progress: TextIO | None = sys.stderr,
) -> None:
    """Run one preparatory stage (its kind's function in ``STAGE_RUNNERS``), writing its output file ``out``."""

    def engine(method: str, rounds: int | None = None, **kwargs) -> Engine:
        run_cfg = cfg if rounds is None else dataclasses.replace(cfg, rounds=rounds)
        return make_engine(
            run_cfg,
            MethodSpec(method, method),
            dataset,
            data_root,
            partition_file,
            seed,
            threads,
            work_dir=work_dir,
            progress=progress,
            **kwargs,
        )

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    STAGE_RUNNERS[stage.kind](StageJob(stage, dataset, Path(out), lower, engine))


def _json_safe(obj):
    """NaN/inf (a diverged run's metrics) as null: metrics files are strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def run_cell(
    cfg: FLConfig,
    method: MethodSpec,
    dataset: str,
    data_root: str | Path,
    partition_file: str | Path,
    seed: int,
    out_dir: str | Path,
    work_dir: str | Path | None = None,
    tracking: dict[str, Any] | None = None,
    threads: int = 1,
    progress: TextIO | None = sys.stderr,
    stages: dict[str, Path] | None = None,
) -> dict[str, Any]:
    live = None
    callbacks = {}
    if tracking:
        from fed.tracking import LiveRun

        params = {
            "preset": cfg.to_dict(),
            "method": {"name": method.name, "algorithm": method.algorithm, "params": method.params},
            "dataset": dataset,
            "seed": seed,
        }
        live = LiveRun(
            tracking["uri"],
            tracking["experiment"],
            cell_label(dataset, partition_file, method, seed),
            params,
            tracking.get("tags", {}),
        )
        callbacks = {"on_start": live.start, "on_round": live.log_round}
    engine = make_engine(
        cfg,
        method,
        dataset,
        data_root,
        partition_file,
        seed,
        threads,
        work_dir=work_dir,
        progress=progress,
        stages=stages,
        **callbacks,
    )
    previous = (
        signal.signal(signal.SIGTERM, _terminate) if threading.current_thread() is threading.main_thread() else None
    )
    try:
        summary = engine.run()
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        torch.save(engine.global_state, out / "model.pt")  # the final global model (figures invert it)
        record = {
            "dataset": dataset,
            "partition_file": str(partition_file),
            "seed": seed,
            "method": {"name": method.name, "algorithm": method.algorithm, "params": method.params},
            "config": cfg.to_dict(),
            "identity": engine.fingerprint(),
            **summary,
        }
        tmp = out / "metrics.json.tmp"
        tmp.write_text(json.dumps(_json_safe(record), indent=1, allow_nan=False))
        scalar_history = [{k: v for k, v in row.items() if not isinstance(v, list)} for row in summary["history"]]
        pd.DataFrame(scalar_history).to_csv(out / "history.csv", index=False)
        tmp.replace(out / "metrics.json")
        if live:
            live.finish(summary, [out / "metrics.json", out / "history.csv"])
        return record
    except BaseException:
        if live:
            live.fail()  # never left RUNNING by an error or SIGTERM (a SIGKILLed run is resumed next time)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _terminate(signum, frame):
    raise SystemExit(f"terminated by signal {signum}")
