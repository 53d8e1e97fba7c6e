"""fedrepro: reproducible federated learning with data augmentation under non-IID data."""

__version__ = "0.1.0"
