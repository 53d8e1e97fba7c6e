"""Audit one finished cell (fed.leakage): what its method shared, what its final model gives away, and the peak
memory of its train job and of its stages' jobs (Snakemake benchmarks; a stage's is read where it exists)."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

import json
from pathlib import Path

from fed.leakage import audit_files

stages = {k.removeprefix("stage_"): v for k, v in snakemake.input.items() if k.startswith("stage_")}
with open(snakemake.log[0], "w") as log:
    record = audit_files(
        snakemake.input.metrics,
        snakemake.input.model,
        snakemake.params.data_root,
        snakemake.input.partition,
        stages,
        snakemake.threads,
        snakemake.input.benchmark,
    )
    print(json.dumps(record, indent=1), file=log)
Path(snakemake.output[0]).write_text(json.dumps(record, indent=1, allow_nan=False))
