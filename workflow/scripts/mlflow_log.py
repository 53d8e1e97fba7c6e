"""Log a paper's finished cells to MLflow in one process (tracking_mode: batch)."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from pathlib import Path

from fed.tracking import log_finished

runs = log_finished(snakemake.params.uri, list(snakemake.input.metrics))
Path(snakemake.output[0]).write_text("".join(f"{path}\t{run_id}\n" for path, run_id in runs.items()))
