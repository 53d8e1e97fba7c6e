"""What every figure kind shares: the common keys, JSON schemas of shared values, and the cell record."""

from __future__ import annotations

import itertools

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
