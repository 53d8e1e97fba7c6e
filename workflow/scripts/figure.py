"""Draw one of the papers' figures: its kind (fed.reporting.figure_kinds) reads the cells it asked for."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from fed.reporting.figure_kinds import FIGURE_KINDS
from fed.reporting.figures import figure_caption

fig = snakemake.params.figure
caption = figure_caption(fig, snakemake.params.presets)
kind = FIGURE_KINDS[fig["kind"]]
models = list(snakemake.input.models) if kind.NEEDS_MODELS else [None] * len(snakemake.input.metrics)
kind.draw(
    fig,
    snakemake.params.cells,
    list(zip(snakemake.input.metrics, models)),
    list(snakemake.input.stages),
    snakemake.output.png,
    snakemake.output.csv,
    caption,
    **({"data": list(snakemake.input.data)} if kind.NEEDS_DATA else {}),
)
