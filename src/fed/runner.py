"""Run one cell (preset × dataset × partition × method × seed): the function behind the ``train`` rule and
``fed run``. Writes ``metrics.json`` and ``history.csv`` to ``out_dir`` and logs the run to MLflow."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
import torch

from fed.algorithms import build_algorithm
from fed.config import FLConfig, MethodSpec
from fed.data.datasets import load_dataset
from fed.engine import Engine, resolve_device


def make_engine(cfg: FLConfig, method: MethodSpec, dataset: str, data_root: str | Path,
                partition_file: str | Path, seed: int, threads: int = 1, **engine_kwargs) -> Engine:
    torch.set_num_threads(threads)
    if resolve_device(cfg.device).type == "cuda":
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    train = load_dataset(dataset, data_root, "train")
    test = load_dataset(dataset, data_root, "test")
    partition = json.loads(Path(partition_file).read_text())
    label = f"{dataset}/{Path(partition_file).parent.name}/{method.name}/seed{seed}"
    return Engine(cfg, build_algorithm(method.algorithm, **method.params), train, test, partition, seed,
                  label=label, **engine_kwargs)


def run_prefix(cfg: FLConfig, dataset: str, data_root: str | Path, partition_file: str | Path, seed: int,
               out: str | Path, work_dir: str | Path, warm_start: str | Path | None = None, threads: int = 1,
               progress: TextIO | None = sys.stderr) -> None:
    """FedAvg up to round ``cfg.rounds``; its final checkpoint (``out``) seeds every start-round run after it."""
    engine = make_engine(cfg, MethodSpec("fedavg", "fedavg"), dataset, data_root, partition_file, seed, threads,
                         work_dir=work_dir, warm_start=warm_start, progress=progress)
    engine.run()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(engine.checkpoint_path, out)


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
    warm_start: str | Path | None = None,
) -> dict[str, Any]:
    engine = make_engine(cfg, method, dataset, data_root, partition_file, seed, threads, work_dir=work_dir,
                         warm_start=warm_start, progress=progress)
    summary = engine.run()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(engine.global_state, out / "model.pt")  # the final global model (figures invert it)
    record = {"dataset": dataset, "partition_file": str(partition_file), "seed": seed,
              "method": {"name": method.name, "algorithm": method.algorithm, "params": method.params},
              "config": cfg.to_dict(), **summary}
    (out / "metrics.json").write_text(json.dumps(record, indent=1, allow_nan=True))
    scalar_history = [{k: v for k, v in row.items() if not isinstance(v, list)} for row in summary["history"]]
    pd.DataFrame(scalar_history).to_csv(out / "history.csv", index=False)
    if tracking:
        from fed.tracking import log_run

        params = {"preset": cfg.to_dict(), "method": record["method"], "dataset": dataset, "seed": seed}
        log_run(tracking["uri"], tracking["experiment"], engine.label, params, tracking.get("tags", {}), summary,
                [out / "metrics.json", out / "history.csv"])
    return record
