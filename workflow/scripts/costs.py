"""Measured cost of every method of a paper's tables: run wall time, seconds per round, generation time."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from fed.reporting.tables import cost_table, write_frame

cells = [dict(c, path=path) for c, path in zip(snakemake.params.cells, snakemake.input)]
caption = (
    f"Measured cost of the {snakemake.wildcards.paper} table runs under preset '{snakemake.wildcards.preset}' "
    "(mean over seeds; wall time includes evaluation; jobs ran side by side, so times include contention)."
)
write_frame(cost_table(cells), snakemake.output.csv.removesuffix(".csv"), caption)
