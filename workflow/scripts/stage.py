"""Run one preparatory stage (fed.stages), e.g. a FedAvg prefix continuing from the next-lower one."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from fed.config import FLConfig, MethodSpec
from fed.runner import run_stage
from fed.stages import Stage

w, p = snakemake.wildcards, snakemake.params
with open(snakemake.log[0], "w") as log:
    run_stage(
        Stage.of(p.stage["kind"], **p.stage["params"]),
        FLConfig.from_preset(p.preset, w.dataset),
        w.dataset,
        p.data_root,
        snakemake.input.partition,
        int(w.seed),
        snakemake.output[0],
        p.work_dir,
        lower=snakemake.input.get("lower"),
        after=snakemake.input.get("after"),
        threads=snakemake.threads,
        progress=log,
        method=MethodSpec.from_config(p.method_name, p.method) if p.method else None,
    )
