"""Partition a dataset's training set for one preset (number of clients) and seed."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

import json
from pathlib import Path

from fed.config import for_dataset
from fed.data.datasets import load_labels
from fed.data.partition import make_partition

spec = dict(snakemake.params.spec)
preset = for_dataset(snakemake.params.preset, snakemake.wildcards.dataset)
part = make_partition(
    load_labels(snakemake.wildcards.dataset, Path(snakemake.input[0]).parents[1]),  # <root>/<dataset>/tensors.pt
    spec.pop("scheme"),
    num_clients=preset.get("num_clients"),
    avg_client_size=preset.get("avg_client_size"),
    seed=int(snakemake.wildcards.seed),
    local_test_fraction=preset["local_test_fraction"],
    **spec,
)
out = Path(snakemake.output[0])
tmp = out.with_suffix(".tmp")
tmp.write_text(json.dumps(part))
tmp.replace(out)  # atomic: a killed job never leaves a truncated partition behind
