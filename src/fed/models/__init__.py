"""Model registry: ``build_model(name, in_channels, num_classes, image_size)``; every model is a
:class:`~fed.models.base.SplitModel` (``features`` / ``head``, cut at ``cut_layer``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from fed.models.base import SplitModel
from fed.models.cnn import DAFLCNN, FedZDACifarCNN, FedZDAMnistCNN
from fed.models.mobilenet import MobileNetV2
from fed.models.resnet import resnet
from fed.models.vae import cifar_cnn as dpms_cifar_cnn
from fed.models.vae import fmnist_cnn as dpms_fmnist_cnn

MODELS: dict[str, Callable[..., SplitModel]] = {
    "cnn_mnist": FedZDAMnistCNN,
    "cnn_cifar": FedZDACifarCNN,
    "cnn_dafl": DAFLCNN,  # DA-FL: 2 conv + 2 FC
    "cnn_dpms_fmnist": dpms_fmnist_cnn,  # FedDPMS: the VAE's encoder trunk + classifier (FMNIST sizes)
    "cnn_dpms_cifar": dpms_cifar_cnn,  # FedDPMS: CIFAR-10/100 sizes
    "resnet18": partial(resnet, 18),
    "resnet34": partial(resnet, 34),
    "mobilenetv2": MobileNetV2,  # cut at the pooled 1280-d penultimate layer
    "mobilenetv2_flea": partial(MobileNetV2, cut=1),  # FLea: activations of the first inverted-residual block
}


def build_model(name: str, in_channels: int, num_classes: int, image_size: int) -> SplitModel:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid choices: {sorted(MODELS)}")
    return MODELS[name](in_channels=in_channels, num_classes=num_classes, image_size=image_size)


__all__ = ["MODELS", "SplitModel", "build_model"]
