"""Partition a dataset's training set for one preset (number of clients) and seed."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from pathlib import Path

from fed.data.partition import write_partition

write_partition(
    snakemake.wildcards.dataset,
    Path(snakemake.input[0]).parents[1],  # <root>/<dataset>/tensors.pt
    snakemake.params.spec,
    snakemake.params.preset,
    int(snakemake.wildcards.seed),
    snakemake.output[0],
)
