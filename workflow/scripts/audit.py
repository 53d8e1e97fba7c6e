"""Audit one finished cell (fed.leakage): what its method shared, what its final model gives away, and the peak
memory of its train job and of its stages' jobs (Snakemake benchmarks; a stage's is read where it exists)."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

import csv
import json
from pathlib import Path

from fed.leakage import audit_cell


def job(benchmark: Path) -> dict:
    """Wall seconds, peak resident memory (MB) and CPU seconds of one job."""
    row = next(csv.DictReader(benchmark.open(), delimiter="\t"))
    return {"seconds": float(row["s"]), "max_rss_mb": float(row["max_rss"]), "cpu_seconds": float(row["cpu_time"])}


stages = {k.removeprefix("stage_"): v for k, v in snakemake.input.items() if k.startswith("stage_")}
with open(snakemake.log[0], "w") as log:
    record = audit_cell(
        json.loads(Path(snakemake.input.metrics).read_text()),
        snakemake.input.model,
        snakemake.params.data_root,
        snakemake.input.partition,
        stages,
        threads=snakemake.threads,
    )
    record["jobs"] = {"train": job(Path(snakemake.input.benchmark))}
    for name, path in stages.items():
        if (bench := Path(path).with_suffix(".benchmark.tsv")).exists():
            record["jobs"][f"stage {name}: {Path(path).stem}"] = job(bench)
    print(json.dumps(record, indent=1), file=log)
Path(snakemake.output[0]).write_text(json.dumps(record, indent=1, allow_nan=False))
