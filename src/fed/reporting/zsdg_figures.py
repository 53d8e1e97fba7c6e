"""The data behind Fed-ZDA's ZSDG figures (Fig. 3 and 4), computed from trained cells' models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torchvision

from fed.data.datasets import info
from fed.metrics import per_class_accuracy
from fed.models import build_model
from fed.zsdg import ZSDGConfig, zsdg


def load_cell_model(metrics_path: str | Path, model_path: str | Path) -> tuple[torch.nn.Module, dict]:
    """The final global model of a cell, rebuilt from the architecture its metrics.json records."""
    record = json.loads(Path(metrics_path).read_text())
    meta = info(record["dataset"])
    model = build_model(record["config"]["model"], meta.channels, meta.num_classes, meta.size)
    model.load_state_dict(torch.load(model_path, weights_only=True, map_location="cpu"))
    return model.eval(), record


def load_stage_model(path: str | Path) -> tuple[torch.nn.Module, dict]:
    """A model a ``centralized_model`` stage wrote (fed.runner.run_centralized_model), with its record."""
    record = torch.load(path, weights_only=True, map_location="cpu")
    meta = info(record["dataset"])
    model = build_model(record["model"], meta.channels, meta.num_classes, meta.size)
    model.load_state_dict(record["state"])
    return model.eval(), record


def _generate(model, record, zsdg_params, seed):
    meta = info(record["dataset"])
    cfg = ZSDGConfig.from_params(zsdg_params)
    return zsdg(
        model, meta.num_classes, (meta.channels, meta.size, meta.size), cfg, torch.Generator().manual_seed(seed)
    )


def class_accuracy_table(pairs, zsdg_params: dict) -> pd.DataFrame:
    """``pairs``: (dataset, seed, (source metrics, source model), oracle stage file). Per class: the source FL
    model's test accuracy, the oracle's accuracy on ZSDG images inverted from the source, and the oracle's own
    test accuracy. A diverged source or oracle is a result, not a crash: its (dataset, seed) is counted in
    ``diverged_seeds`` and left out."""
    rows = []
    for dataset, seed, source, oracle in pairs:
        model, record = load_cell_model(*source)
        oracle_model, oracle_record = load_stage_model(oracle)
        if record["diverged"] or oracle_record["diverged"]:
            rows += [
                {"dataset": dataset, "seed": seed, "class": c, "diverged": True}
                for c in range(info(dataset).num_classes)
            ]
            continue
        x, y, _ = _generate(model, record, zsdg_params, seed)
        with torch.inference_mode():
            pred = oracle_model(x).argmax(1)
        oracle_acc = per_class_accuracy(pred.numpy(), y.numpy(), info(dataset).num_classes)
        for c, (m, o) in enumerate(zip(record["last"]["per_class_acc"], oracle_acc)):
            rows.append(
                {
                    "dataset": dataset,
                    "seed": seed,
                    "class": c,
                    "model_acc": m,
                    "oracle_acc": float(o),
                    "oracle_test_acc": oracle_record["last"]["global_acc"],
                    "diverged": False,
                }
            )
    columns = ["dataset", "seed", "class", "model_acc", "oracle_acc", "oracle_test_acc", "diverged"]
    df = pd.DataFrame(rows, columns=columns)
    return (
        df.groupby(["dataset", "class"], sort=False)
        .agg(
            model_acc=("model_acc", "mean"),
            oracle_acc=("oracle_acc", "mean"),
            oracle_test_acc=("oracle_test_acc", "mean"),
            seeds=("model_acc", "count"),
            diverged_seeds=("diverged", "sum"),
        )
        .reset_index()
    )


def image_grid(source, zsdg_params: dict, seed: int) -> np.ndarray:
    """ZSDG images from a cell's model, one row per class, de-normalised to [0, 1], as an (H, W, C) array."""
    model, record = load_cell_model(*source)
    meta = info(record["dataset"])
    x, _, _ = _generate(model, record, zsdg_params, seed)
    x = x * torch.tensor(meta.std).view(1, -1, 1, 1) + torch.tensor(meta.mean).view(1, -1, 1, 1)
    per_class = ZSDGConfig.from_params(zsdg_params).per_class
    grid = torchvision.utils.make_grid(x.clamp(0, 1), nrow=per_class, padding=1, pad_value=1.0)
    return grid.permute(1, 2, 0).numpy()
