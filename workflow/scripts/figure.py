"""Draw one of the papers' figures: its kind (fed.reporting.figure_kinds) reads the cells it asked for."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from fed.reporting.figure_kinds import FIGURE_KINDS

fig = snakemake.params.figure
caption = (
    fig.get("title", fig["output"])
    + " — "
    + "; ".join(
        f"{name}: {p.get('reduction') or 'paper setting'}" + (f" ({p['note']})" if p.get("note") else "")
        for name, p in snakemake.params.presets.items()
    )
)
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
