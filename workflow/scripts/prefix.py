"""Train the FedAvg prefix up to round r (continuing from the next-lower prefix when there is one)."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from fed.config import FLConfig
from fed.runner import run_prefix

w, p = snakemake.wildcards, snakemake.params
with open(snakemake.log[0], "w") as log:
    run_prefix(
        FLConfig.from_preset(p.preset, w.dataset),
        w.dataset,
        p.data_root,
        snakemake.input.partition,
        int(w.seed),
        snakemake.output[0],
        p.work_dir,
        warm_start=snakemake.input.get("warm"),
        threads=snakemake.threads,
        progress=log,
    )
