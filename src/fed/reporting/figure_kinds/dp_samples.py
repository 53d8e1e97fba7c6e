"""Synthetic samples of one client's DP-CGAN per privacy budget ε0, from one fixed set of input noise (DA-FL Fig. 5:
the client holding only class 8, ε0 ∈ {1, 5, 20, 50, ∞}). Reads the methods' ``dp_cgan`` stages, not their cells."""

from __future__ import annotations

import pandas as pd

from fed.reporting.figure_kinds.common import STR

KEYS = {
    "preset": (True, STR),
    "partition": (True, STR),
    "methods": (True, {"type": "array", "items": STR, "minItems": 1, "description": "DA-FL methods, one per ε0"}),
    "client": (True, {"type": "integer", "minimum": 0}),
    "label": (True, {"type": "integer", "minimum": 0}),
    "samples": (False, {"type": "integer", "minimum": 1}),
}


def cells(fig):
    return []


def gan_stage(spec: dict):
    """The ``dp_cgan`` stage a configured DA-FL method declares."""
    from fed.algorithms import build_algorithm
    from fed.config import MethodSpec

    method = MethodSpec.from_config("dafl", spec)
    return build_algorithm(method.algorithm, **method.params).stages()["gans"]


def stages(fig, methods):
    return [
        (fig["preset"], d, fig["partition"], s, gan_stage(methods[m]))
        for d in fig["datasets"]
        for s in fig["seeds"]
        for m in fig["methods"]
    ]


def draw(fig, cells, files, stages, png, csv, caption):
    import torch

    from fed.dpgan import PSGSettings, generate
    from fed.reporting.figures import plot_image_grids, tile

    n = fig.get("samples", 8)
    labels = torch.full((n,), fig["label"])
    panels, rows = {}, []
    for path in stages:  # seed 0 for every ε0: the same noise z behind every panel
        record = torch.load(path, weights_only=False, map_location="cpu")
        settings = PSGSettings.from_params(record["settings"])
        client = record["clients"][fig["client"]]
        images = generate(client["generator"], labels, record["num_classes"], record["channels"], settings, seed=0)
        panels[f"ε0 = {settings.epsilon:g}: {client['steps']} steps, ε = {client['epsilon']:.2f}"] = tile(
            (images + 1) / 2
        )
        rows.append(
            {
                "epsilon0": settings.epsilon,
                "client": fig["client"],
                "label": fig["label"],
                "steps": client["steps"],
                "scheduled_steps": client["scheduled_steps"],
                "epsilon_spent": client["epsilon"],
                "stopped_by_budget": client["stopped_by_budget"],
            }
        )
    pd.DataFrame(rows).to_csv(csv, index=False)
    plot_image_grids(panels, png, caption)
