"""Figure of a partition: samples per class for every client (like DA-FL Fig. 2)."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

import json

from fed.reporting.figures import plot_partition

with open(snakemake.input[0]) as fh:
    part = json.load(fh)
w = snakemake.wildcards
plot_partition(part, snakemake.output[0], f"{w.dataset} · {w.partition} · {w.preset} · seed {w.seed}")
