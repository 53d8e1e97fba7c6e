"""Time of the GAN stage against the FL stage, per method and scenario (DA-FL Fig. 7: "Ours-Pre" vs "Ours-Main"; the
paper measures the pre-processing stage at 10.2-16.7 % of the main task). Reads the cells' wall time and the DA-FL
method's ``dp_cgan`` stage (its clients' training seconds: summed, as on one machine, and the slowest client, as
when clients train in parallel)."""

from __future__ import annotations

import itertools
import json

import pandas as pd

from fed.reporting.figure_kinds.common import STR
from fed.reporting.figure_kinds.dp_samples import gan_stage

KEYS = {
    "preset": (True, STR),
    "partitions": (True, {"type": "array", "items": STR, "minItems": 1}),
    "methods": (True, {"type": "array", "items": STR, "minItems": 1}),
    "gan_method": (True, STR),
}


def stages(fig, methods):
    return [
        (fig["preset"], d, p, s, gan_stage(methods[fig["gan_method"]]))
        for d, p, s in itertools.product(fig["datasets"], fig["partitions"], fig["seeds"])
    ]


def draw(fig, cells, files, stages, png, csv, caption):
    import torch

    from fed.reporting.figures import plot_stage_cost

    rows = [
        {
            **{k: c[k] for k in ("dataset", "partition", "method", "seed")},
            "stage": "FL",
            "seconds": json.loads(open(metrics).read())["wall_seconds"],
        }
        for c, (metrics, _) in zip(cells, files)
    ]
    keys = list(itertools.product(fig["datasets"], fig["partitions"], fig["seeds"]))
    for (d, p, s), path in zip(keys, stages):
        seconds = [c["seconds"] for c in torch.load(path, weights_only=False, map_location="cpu")["clients"]]
        for stage, value in (("GAN (sum over clients)", sum(seconds)), ("GAN (slowest client)", max(seconds))):
            rows.append(
                {"dataset": d, "partition": p, "method": fig["gan_method"], "seed": s, "stage": stage, "seconds": value}
            )
    df = pd.DataFrame(rows)
    fl = df[(df.stage == "FL") & (df.method == fig["gan_method"])].set_index(["dataset", "partition", "seed"]).seconds
    df["ratio_to_fl"] = [
        r.seconds / fl.get((r.dataset, r.partition, r.seed), float("nan")) if r.stage != "FL" else float("nan")
        for r in df.itertuples()
    ]
    df.to_csv(csv, index=False)
    plot_stage_cost(df, fig["gan_method"], png, caption)
