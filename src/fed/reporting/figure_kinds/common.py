"""What every figure kind shares: the common keys, JSON schemas of shared values, and the cell record."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

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
