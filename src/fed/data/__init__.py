"""Datasets (``fed.data.datasets``: PyTorch tensors) and partitions (``fed.data.partition``: NumPy only). Import
from the modules: this package imports neither, so a partition job never loads PyTorch."""
