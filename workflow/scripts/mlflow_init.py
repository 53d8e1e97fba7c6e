"""Create the MLflow store and experiments once, before training jobs write to it concurrently."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from pathlib import Path

from fed.tracking import init_store

ids = init_store(snakemake.params.uri, [snakemake.wildcards.paper])
Path(snakemake.output[0]).write_text("".join(f"{name}\t{i}\n" for name, i in ids.items()))
