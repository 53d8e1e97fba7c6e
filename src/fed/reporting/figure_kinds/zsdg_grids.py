"""Grids of ZSDG images inverted from several models, one panel per source (Fed-ZDA Fig. 4); the first dataset
and seed."""

from __future__ import annotations

import json

import pandas as pd

from fed.reporting.figure_kinds.common import CELLREF, ZSDG, cell

NEEDS_MODELS = True  # draw() reads the cells' model.pt

KEYS = {
    "sources": (True, {"type": "object", "additionalProperties": CELLREF, "minProperties": 1}),
    "zsdg": (False, ZSDG),
}


def presets(fig):
    return [ref["preset"] for ref in fig["sources"].values()]


def cells(fig):
    return [
        cell(ref["preset"], d, ref["partition"], ref["method"], s)
        for d in fig["datasets"]
        for s in fig["seeds"]
        for ref in fig["sources"].values()
    ]


def draw(fig, cells, files, stages, png, csv, caption):
    from fed.reporting.figures import plot_image_grids
    from fed.reporting.zsdg_figures import image_grid

    labels = list(fig["sources"])
    panels = {label: image_grid(pair, fig.get("zsdg", {}), fig["seeds"][0]) for label, pair in zip(labels, files)}
    pd.DataFrame({"panel": labels, "cell": [json.dumps(c) for c in cells[: len(labels)]]}).to_csv(csv, index=False)
    plot_image_grids(panels, png, caption)
