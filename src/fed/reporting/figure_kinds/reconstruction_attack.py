"""FLea Fig. 9(c): how well an attacker reconstructs inputs from the features a method shares — the training MSE of
a decoder from the cut-layer features of a cell's final global model (or, with ``rounds``, its global model after
each of those rounds, as Fig. 9 attacks rounds 1 and 10) back to the inputs, per epoch, on the first ``samples``
training images of the dataset (public data in the threat model). One line per method (FLea with and without the
distance-correlation loss) and round, mean over seeds; the CSV also holds each cell's final test accuracy and the
attacked model's, so one claim can weigh privacy against accuracy."""

from __future__ import annotations

import json

import pandas as pd

from fed.reporting.figure_kinds.common import (
    GRID_KEYS,
    ROUNDS,
    STR,
    attacked_models,
    dataset_reader,
    grid_cells,
    model_at_stages,
)

NEEDS_MODELS = True
NEEDS_DATA = True

KEYS = {
    **GRID_KEYS,
    "x_values": (True, {"type": "object", "additionalProperties": {"type": "number"}, "description": "method -> x"}),
    "x_label": (False, STR),
    "samples": (False, {"type": "integer", "minimum": 64}),
    "epochs": (False, {"type": "integer", "minimum": 1}),
    "width": (False, {"type": "integer", "minimum": 4}),
    "rounds": ROUNDS,
}


def cells(fig):
    if missing := set(fig["methods"]) - set(fig["x_values"]):
        raise ValueError(f"figure {fig['output']}: x_values has no value for the methods {sorted(missing)}")
    return grid_cells(fig)


def stages(fig, methods):
    return model_at_stages(fig)


def attack_rows(fig, cells, files, stages, data) -> pd.DataFrame:
    import torch

    from fed.attacks import reconstruction_curve

    rows, read = [], dataset_reader()
    for a in attacked_models(fig, cells, files, stages):
        c = cells[a.index]
        x = read(c["dataset"], data[a.index]).x[: fig.get("samples", 5000)]
        curve = (
            []
            if a.diverged
            else reconstruction_curve(
                a.model.features,
                x,
                fig.get("epochs", 20),
                torch.Generator().manual_seed(c["seed"]),
                width=fig.get("width", 32),
            )
        )
        rows.append(
            {
                **{k: c[k] for k in ("dataset", "partition", "method", "seed")},
                "round": a.round,
                "x": fig["x_values"][c["method"]],
                "global_acc": a.cell_metrics.get("global_acc"),  # the cell's: the accuracy the method ends with
                "attacked_acc": a.metrics.get("global_acc"),  # the attacked model's
                "mse": curve[-1] if curve else None,
                "curve": json.dumps([round(v, 6) for v in curve]),
                "diverged": a.diverged,
            }
        )
    return pd.DataFrame(rows)


def draw(fig, cells, files, stages, png, csv, caption, data):
    from fed.reporting.figures import plot_reconstruction

    df = attack_rows(fig, cells, files, stages, data)
    df.to_csv(csv, index=False)
    plot_reconstruction(df, fig.get("x_label", "x"), png, caption)
