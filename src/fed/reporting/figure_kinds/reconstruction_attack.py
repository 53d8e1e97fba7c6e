"""FLea Fig. 9(c): how well an attacker reconstructs inputs from the features a method shares — the training MSE of
a decoder from the cut-layer features of a cell's final global model back to the inputs, per epoch, on the first
``samples`` training images of the dataset (public data in the threat model). One line per method (FLea with and
without the distance-correlation loss), mean over seeds; the CSV also holds each cell's test accuracy, so one claim
can weigh privacy against accuracy."""

from __future__ import annotations

import json

import pandas as pd

from fed.reporting.figure_kinds.common import GRID_KEYS, STR, dataset_reader, grid_cells

NEEDS_MODELS = True
NEEDS_DATA = True

KEYS = {
    **GRID_KEYS,
    "x_values": (True, {"type": "object", "additionalProperties": {"type": "number"}, "description": "method -> x"}),
    "x_label": (False, STR),
    "samples": (False, {"type": "integer", "minimum": 64}),
    "epochs": (False, {"type": "integer", "minimum": 1}),
    "width": (False, {"type": "integer", "minimum": 4}),
}


def cells(fig):
    if missing := set(fig["methods"]) - set(fig["x_values"]):
        raise ValueError(f"figure {fig['output']}: x_values has no value for the methods {sorted(missing)}")
    return grid_cells(fig)


def attack_rows(fig, cells, files, data) -> pd.DataFrame:
    import torch

    from fed.attacks import reconstruction_curve
    from fed.reporting.zsdg_figures import load_cell_model

    rows, read = [], dataset_reader()
    for c, (metrics, model_path), tensors in zip(cells, files, data):
        model, record = load_cell_model(metrics, model_path)
        x = read(c["dataset"], tensors).x[: fig.get("samples", 5000)]
        curve = (
            []
            if record["diverged"]
            else reconstruction_curve(
                model.features,
                x,
                fig.get("epochs", 20),
                torch.Generator().manual_seed(c["seed"]),
                width=fig.get("width", 32),
            )
        )
        rows.append(
            {
                **{k: c[k] for k in ("dataset", "partition", "method", "seed")},
                "x": fig["x_values"][c["method"]],
                "global_acc": record[record["config"]["report"]].get("global_acc"),
                "mse": curve[-1] if curve else None,
                "curve": json.dumps([round(v, 6) for v in curve]),
                "diverged": record["diverged"],
            }
        )
    return pd.DataFrame(rows)


def draw(fig, cells, files, stages, png, csv, caption, data):
    from fed.reporting.figures import plot_reconstruction

    df = attack_rows(fig, cells, files, data)
    df.to_csv(csv, index=False)
    plot_reconstruction(df, fig.get("x_label", "x"), png, caption)
