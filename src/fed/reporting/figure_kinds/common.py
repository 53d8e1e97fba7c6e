"""What every figure kind shares: the common keys, JSON schemas of shared values, and the cell record."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any, NamedTuple

STR = {"type": "string"}
CELLREF = {
    "type": "object",
    "required": ["preset", "partition", "method"],
    "additionalProperties": False,
    "properties": {"preset": STR, "partition": STR, "method": STR},
}
ZSDG = {"type": "object", "description": "ZSDG options (fed.zsdg.ZSDGConfig)"}
COMMON_KEYS = {
    "paper": (True, STR),
    "kind": (True, STR),
    "title": (False, STR),
    "output": (True, STR),
    "datasets": (True, {"type": "array", "items": STR, "minItems": 1}),
    "seeds": (True, {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}),
}


STRINGS = {"type": "array", "items": STR, "minItems": 1}
# the keys of a kind that reads the grid datasets × partitions × methods × seeds of one preset (``grid_cells``);
# methods are configured names, sweep variants included (e.g. fedprox_best-mu0.01)
GRID_KEYS = {"preset": (True, STR), "partitions": (True, STRINGS), "methods": (True, STRINGS)}
LABELS = (False, {"type": "object", "additionalProperties": STR, "description": "line -> legend label"})


def cell(preset: str, dataset: str, partition: str, method: str, seed: int) -> dict:
    return dict(preset=preset, dataset=dataset, partition=partition, method=method, seed=seed)


def grid_cells(fig: dict) -> list[dict]:
    """The cells of a figure over ``datasets`` × ``partitions`` × ``methods`` × ``seeds`` under one ``preset``."""
    return [
        cell(fig["preset"], d, p, m, s)
        for d, p, m, s in itertools.product(fig["datasets"], fig["partitions"], fig["methods"], fig["seeds"])
    ]


def dataset_reader():
    """For kinds that read prepared data (``NEEDS_DATA``): ``read(dataset, tensors, split)`` loads a split from the
    cell's ``tensors.pt`` once per figure, however many cells share it."""

    @functools.cache
    def read(dataset: str, tensors: str, split: str = "train"):
        from fed.data.datasets import load_dataset

        return load_dataset(dataset, Path(tensors).parents[1], split)

    return read


# the attacks' figures (FLea Fig. 9c-d): which global model of each cell they attack
ROUNDS = (
    False,
    {
        "type": "array",
        "items": {"type": "integer", "minimum": 1},
        "minItems": 1,
        "description": "attack each cell's global model after these rounds (model_at stages), not its final one",
    },
)


def model_at_stages(fig: dict) -> list[tuple]:
    """With ``rounds``: a ``model_at`` stage per cell (``grid_cells`` order) and round, else none."""
    from fed.stages import Stage

    return [
        (c["preset"], c["dataset"], c["partition"], c["seed"], Stage.of("model_at", method=c["method"], rounds=r))
        for c in grid_cells(fig)
        for r in fig.get("rounds", [])
    ]


class Attacked(NamedTuple):
    index: int  # of the cell
    round: int | None  # None: the cell's final model
    model: Any
    diverged: bool
    metrics: dict  # the attacked model's test metrics
    cell_metrics: dict  # the cell's, as its tables report them


def attacked_models(fig: dict, cells: list[dict], files: list, stages: list):
    """Each model a figure attacks (``Attacked``): each cell's final model, or with ``rounds`` its model after each
    of them (the ``model_at`` stages, in ``model_at_stages`` order)."""
    import json

    from fed.reporting.zsdg_figures import load_cell_model, load_stage_model

    rounds = fig.get("rounds")
    for i, (metrics, model_path) in enumerate(files):
        if not rounds:
            model, record = load_cell_model(metrics, model_path)
            reported = record[record["config"]["report"]]
            yield Attacked(i, None, model, record["diverged"], reported, reported)
            continue
        record = json.loads(Path(metrics).read_text())  # the cell's metrics only: its final model is not attacked
        reported = record[record["config"]["report"]]
        for j, r in enumerate(rounds):
            model, stage = load_stage_model(stages[i * len(rounds) + j])
            yield Attacked(i, r, model, stage["diverged"], stage["last"], reported)
