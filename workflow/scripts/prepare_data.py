"""Cache a dataset as tensors: torchvision download, offline import, or generated synthetic data."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from fed.data.datasets import DatasetUnavailableError, prepare

try:
    prepare(snakemake.wildcards.dataset, snakemake.params.root, snakemake.params.download, snakemake.params.synthetic)
except DatasetUnavailableError as err:
    with open(snakemake.log[0], "w") as log:
        print(err, file=log)
    sys.exit(f"\n{err}\n")
