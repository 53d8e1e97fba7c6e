"""Create the MLflow store and experiments once, before training jobs write to it concurrently."""
from pathlib import Path

from fed.tracking import init_store

ids = init_store(snakemake.params.uri, snakemake.params.experiments)
Path(snakemake.output[0]).write_text("".join(f"{name}\t{i}\n" for name, i in ids.items()))
