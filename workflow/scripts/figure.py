"""Draw one of the papers' figures from the cells it reads (see figure_cells in common.smk for their order)."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

import json

import pandas as pd

from fed.reporting import figures
from fed.reporting.zsdg_figures import class_accuracy_table, image_grid

fig, cells = snakemake.params.figure, snakemake.params.cells
pairs = list(zip(snakemake.input.metrics, snakemake.input.models))
caption = (
    fig.get("title", fig["output"])
    + " — "
    + "; ".join(f"{name}: {p.get('reduction') or 'paper setting'}" for name, p in snakemake.params.presets.items())
)
out = snakemake.output

if fig["kind"] == "start_round_variance":
    rows = []
    for c, (metrics, _) in zip(cells, pairs):
        with open(metrics) as fh:
            rec = json.load(fh)
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
    df.to_csv(out.csv, index=False)
    figures.plot_start_round_variance(df[~df.diverged], out.png, caption)
elif fig["kind"] == "zsdg_class_accuracy":  # cells: per (dataset, seed): source, oracle
    groups = [(c["dataset"], c["seed"], pairs[i], pairs[i + 1]) for i, c in enumerate(cells) if i % 2 == 0]
    df = class_accuracy_table(groups, fig.get("zsdg", {}))
    df.to_csv(out.csv, index=False)
    figures.plot_zsdg_class_accuracy(df, out.png, caption)
else:  # zsdg_grids: the first dataset and seed, one panel per source
    labels = list(fig["sources"])
    seed = fig["seeds"][0]
    panels = {label: image_grid(pair, fig.get("zsdg", {}), seed) for label, pair in zip(labels, pairs)}
    pd.DataFrame({"panel": labels, "cell": [json.dumps(c) for c in cells[: len(labels)]]}).to_csv(out.csv, index=False)
    figures.plot_image_grids(panels, out.png, caption)
