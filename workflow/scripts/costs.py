"""Measured cost of every method of a paper's tables: run wall time, seconds per round, generation time."""
import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from fed.reporting.tables import cost_table

cells = [dict(c, path=path) for c, path in zip(snakemake.params.cells, snakemake.input)]
table = cost_table(cells)
table.to_csv(snakemake.output.csv, index=False)
caption = (
    f"Measured cost of the {snakemake.wildcards.paper} table runs under preset '{snakemake.wildcards.preset}' "
    "(mean over seeds; wall time includes evaluation; jobs ran side by side, so times include contention)."
)
with open(snakemake.output.md, "w") as fh:
    fh.write(f"{caption}\n\n{table.to_markdown(index=False)}\n")
with open(snakemake.output.html, "w") as fh:
    fh.write(f"<!doctype html><meta charset='utf-8'><p>{caption}</p>{table.to_html(index=False, border=0)}\n")
