"""Test a paper's claims over the table and figure CSVs they read (fed.reporting.claims)."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

import pandas as pd

from fed.reporting.claims import claims_table
from fed.reporting.tables import write_frame

frames = {name: pd.read_csv(path) for name, path in snakemake.input.items()}
table = claims_table(snakemake.params.claims, frames, snakemake.params.reductions)
caption = (
    f"Claims of {snakemake.wildcards.paper}, tested over our runs. A claim is supported only where the runs follow "
    "the paper's protocol; under a reduced preset the row says 'not comparable' and describes our setting only."
)
write_frame(table, snakemake.output.csv.removesuffix(".csv"), caption)
