"""What one FLea client trains on (FLea Figs. 7 and 8), from a FLea cell's history: the classes the feature buffer
F(t) holds, the classes of the client's own data D_k and the class mass of its first augmented batch B̃ (Fig. 7), and
the mixing weights β_i of that batch (Fig. 8), at the given rounds."""

from __future__ import annotations

import json

import pandas as pd

from fed.reporting.figure_kinds.common import STR, cell

KEYS = {
    "preset": (True, STR),
    "partition": (True, STR),
    "method": (True, STR),
    "rounds": (True, {"type": "array", "items": {"type": "integer", "minimum": 2}, "minItems": 1}),
}


def cells(fig):
    return [cell(fig["preset"], d, fig["partition"], fig["method"], fig["seeds"][0]) for d in fig["datasets"]]


def batch_rows(record: dict, rounds: list[int]) -> pd.DataFrame:
    """Long form: one row per (round, what, class or sample index, value); what ∈ buffer, local, mixed, beta."""
    history = {row["round"]: row for row in record["history"]}
    rows = []
    for r in rounds:
        row = history.get(r)
        if row is None or "flea_batch" not in row:
            raise ValueError(f"round {r} of {record['dataset']} has no FLea batch record (a FLea cell, round >= 2?)")
        batch = row["flea_batch"]
        series = {
            "buffer": row["flea_buffer_classes"],
            "local": batch["local_classes"],
            "mixed": batch["mixed_classes"],
            "beta": batch["beta"],
        }
        rows += [
            {"dataset": record["dataset"], "round": r, "client": batch["client"], "what": what, "index": i, "value": v}
            for what, values in series.items()
            for i, v in enumerate(values)
        ]
    return pd.DataFrame(rows)


def draw(fig, cells, files, stages, png, csv, caption):
    from fed.reporting.figures import plot_flea_batch

    df = pd.concat([batch_rows(json.loads(open(m).read()), fig["rounds"]) for m, _ in files], ignore_index=True)
    df.to_csv(csv, index=False)
    plot_flea_batch(df, png, caption)
