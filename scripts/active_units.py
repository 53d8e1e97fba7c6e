"""Which hidden units of a cell's final global model still fire on the test set (``fed.reporting.activity``): per
ReLU, the share of its outputs that are positive and the share of its units that are positive on no test image
(dead), with the model's predicted-class counts. A cell at chance whose layer is dead has collapsed: SGD passes
no gradient through a unit where it is off, so local training from that model barely moves the layers before it.

    python scripts/active_units.py CELL [CELL …] [--data-root data] [--images 2000]
    python scripts/active_units.py results/runs/dafl/fmnist/1-label/fedmix_best-lam0.05/seed0

A cell is a run directory with its ``metrics.json`` and ``model.pt`` (weights are never committed: run the cell).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from fed.data.datasets import load_dataset
from fed.reporting.activity import unit_activity
from fed.reporting.zsdg_figures import load_cell_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cells", nargs="+", type=Path, help="run directories (metrics.json, model.pt)")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--images", type=int, default=2000, help="the first N test images")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for cell in args.cells:
        model, record = load_cell_model(cell / "metrics.json", cell / "model.pt")
        x = load_dataset(record["dataset"], args.data_root, "test").x[: args.images]
        with torch.no_grad():
            logits = model(x)
        predicted = torch.bincount(logits.argmax(1), minlength=logits.shape[1]).tolist()
        print(f"{cell}: {record['method']['name']}, {len(x)} test images, predicted per class {predicted}")
        for row in unit_activity(model, x):
            print(f"  {row['layer']:<16} {row['units']:>5} units  active {row['active']:7.2%}  dead {row['dead']:7.2%}")


if __name__ == "__main__":
    main()
