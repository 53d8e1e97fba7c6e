"""Model registry: ``build_model(name, in_channels, num_classes, image_size)``."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from functools import partial

from fed.models.cnn import FedZDACifarCNN, FedZDAMnistCNN
from fed.models.resnet import resnet

MODELS: dict[str, Callable[..., nn.Module]] = {
    "cnn_mnist": FedZDAMnistCNN,
    "cnn_cifar": FedZDACifarCNN,
    "resnet18": partial(resnet, 18),
    "resnet34": partial(resnet, 34),
}


def build_model(name: str, in_channels: int, num_classes: int, image_size: int) -> nn.Module:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid choices: {sorted(MODELS)}")
    return MODELS[name](in_channels=in_channels, num_classes=num_classes, image_size=image_size)
