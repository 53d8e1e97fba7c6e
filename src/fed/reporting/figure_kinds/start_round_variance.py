"""Variance vs the round an augmentation method starts (Fed-ZDA Fig. 5): one method variant per start round,
each continuing from the shared FedAvg prefix (a ``fedavg_prefix`` stage)."""

from __future__ import annotations

import json

import pandas as pd

from fed.reporting.figure_kinds.common import STR, cell

KEYS = {
    "preset": (True, STR),
    "partition": (True, STR),
    "method": (True, STR),
    "start_rounds": (True, {"type": "array", "items": {"type": "integer", "minimum": 2}, "minItems": 1}),
}


def variant_name(method: str, r: int) -> str:
    return f"{method}-start{r}"


def variants(fig, methods):
    return {variant_name(fig["method"], r): {**methods[fig["method"]], "start_round": r} for r in fig["start_rounds"]}


def cells(fig):
    return [
        cell(fig["preset"], d, fig["partition"], variant_name(fig["method"], r), s)
        for d in fig["datasets"]
        for r in fig["start_rounds"]
        for s in fig["seeds"]
    ]


def draw(fig, cells, files, stages, png, csv, caption):
    from fed.reporting.figures import plot_start_round_variance

    rows = []
    for c, (metrics, _) in zip(cells, files):
        rec = json.loads(open(metrics).read())
        rows.append(
            {
                "dataset": c["dataset"],
                "start_round": rec["method"]["params"]["start_round"],
                "seed": c["seed"],
                "diverged": rec["diverged"],
                **{k: rec["last"][k] for k in ("client_acc_variance", "class_acc_variance")},
            }
        )
    df = pd.DataFrame(rows)
    df.to_csv(csv, index=False)
    plot_start_round_variance(df[~df.diverged], png, caption)  # diverged seeds stay in the CSV, not the mean
