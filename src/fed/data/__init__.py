from fed.data.datasets import DATASETS, DatasetUnavailableError, TensorDataset, load_dataset
from fed.data.partition import PARTITIONS, make_partition

__all__ = ["DATASETS", "DatasetUnavailableError", "TensorDataset", "load_dataset", "PARTITIONS", "make_partition"]
