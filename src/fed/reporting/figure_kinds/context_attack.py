"""FLea Fig. 9(d): can an attacker tell whether shared data carries a context marker (a bright square)? Held-out
accuracy of a logistic-regression detector against the number of shared items it trains on, for FedMix's shared
averages of ``mean_batch`` images and for the cut-layer features of each FLea cell's final global model (or, with
``rounds``, its global model after each of those rounds, as Fig. 9 attacks rounds 1 and 10), mean over seeds. The
items come from the dataset's training images, half of them marked; the averages' line stops where the training set
holds no more groups of ``mean_batch`` images."""

from __future__ import annotations

import pandas as pd

from fed.reporting.figure_kinds.common import (
    GRID_KEYS,
    LABELS,
    ROUNDS,
    attacked_models,
    dataset_reader,
    grid_cells,
    model_at_stages,
)

NEEDS_MODELS = True
NEEDS_DATA = True

KEYS = {
    **GRID_KEYS,
    "labels": LABELS,
    "sizes": (True, {"type": "array", "items": {"type": "integer", "minimum": 2}, "minItems": 1}),
    "marker": (False, {"type": "integer", "minimum": 1}),
    "mean_batch": (False, {"type": "integer", "minimum": 2}),
    "test": (False, {"type": "integer", "minimum": 10}),
    "rounds": ROUNDS,
}


def cells(fig):
    return grid_cells(fig)


def stages(fig, methods):
    return model_at_stages(fig)


def attack_rows(fig, cells, files, stages, data) -> pd.DataFrame:
    import torch

    from fed.attacks import context_detection

    sizes, test, marker = fig["sizes"], fig.get("test", 1000), fig.get("marker", 4)
    group = fig.get("mean_batch", 10)
    rows, averaged, read = [], set(), dataset_reader()
    for a in attacked_models(fig, cells, files, stages):
        c = cells[a.index]
        x = read(c["dataset"], data[a.index]).x
        base = {k: c[k] for k in ("dataset", "partition", "seed")}
        if (c["dataset"], c["seed"]) not in averaged:  # FedMix's averages: no model involved
            averaged.add((c["dataset"], c["seed"]))
            gen = torch.Generator().manual_seed(c["seed"])
            fits = [n for n in sizes if (n + test) * group <= len(x)]  # averages use `group` images each
            scores = context_detection(lambda v: v, x, fits, gen, marker, group, test)
            rows += [
                {**base, "shared": f"FedMix averages of {group}", "n": n, "accuracy": acc} for n, acc in scores.items()
            ]
        if a.diverged:
            continue
        gen = torch.Generator().manual_seed(c["seed"])
        scores = context_detection(a.model.features, x, sizes, gen, marker, 1, test)
        label = fig.get("labels", {}).get(c["method"], f"{c['method']} features")
        label += f", round {a.round}" if a.round else ""
        rows += [{**base, "shared": label, "round": a.round, "n": n, "accuracy": acc} for n, acc in scores.items()]
    return pd.DataFrame(rows)


def draw(fig, cells, files, stages, png, csv, caption, data):
    from fed.reporting.figures import plot_context_attack

    df = attack_rows(fig, cells, files, stages, data)
    df.to_csv(csv, index=False)
    plot_context_attack(df, png, caption)
