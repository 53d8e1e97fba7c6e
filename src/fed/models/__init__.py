"""Model registry: ``build_model(name, in_channels, num_classes, image_size, width)``; every model is a
:class:`~fed.models.base.SplitModel` (``features`` / ``head``, cut at ``cut_layer``); ``initialise`` re-draws a
model's weights by another scheme than PyTorch's defaults (an FL setting: ``init``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from fed.config import INIT_SCHEMES
from fed.models.base import SplitModel
from fed.models.cnn import DAFLCNN, FedZDACifarCNN, FedZDAMnistCNN
from fed.models.flea_nets import AudioNet, HARNet
from fed.models.mobilenet import MobileNetV2
from fed.models.resnet import resnet
from fed.models.vae import cifar_cnn as dpms_cifar_cnn
from fed.models.vae import fmnist_cnn as dpms_fmnist_cnn
from fed.models.vae import fmnist_cnn_block2 as dpms_fmnist_cnn_block2

MODELS: dict[str, Callable[..., SplitModel]] = {
    "cnn_mnist": FedZDAMnistCNN,
    "cnn_cifar": FedZDACifarCNN,
    "cnn_dafl": DAFLCNN,  # DA-FL: 2 conv + 2 FC
    "cnn_dafl_half": partial(DAFLCNN, scale=0.5),  # its widths halved (8, 16, 64): the width study
    "cnn_dafl_quarter": partial(DAFLCNN, scale=0.25),  # quartered (4, 8, 32)
    "cnn_dpms_fmnist": dpms_fmnist_cnn,  # FedDPMS: the VAE's encoder trunk + classifier (FMNIST sizes)
    "cnn_dpms_fmnist_block2": dpms_fmnist_cnn_block2,  # the same cut after its 2nd block (FLea's kind of cut)
    "cnn_dpms_cifar": dpms_cifar_cnn,  # FedDPMS: CIFAR-10/100 sizes
    "resnet18": partial(resnet, 18),
    "resnet34": partial(resnet, 34),
    "mobilenetv2": MobileNetV2,  # cut at the pooled 1280-d penultimate layer
    "mobilenetv2_flea": partial(MobileNetV2, cut=1),  # FLea: activations of the first inverted-residual block
    "audionet": AudioNet,  # FLea's UrbanSound8K net (4 conv blocks + FC), cut after block 1; any image input
    "harnet": HARNet,  # FLea's UCI-HAR net (4 temporal conv blocks + FC), cut after block 1
}


def build_model(name: str, in_channels: int, num_classes: int, image_size: int, width: int | None = None) -> SplitModel:
    """``image_size`` is the input's height; ``width`` (default: the height) reaches the models whose size depends on
    it (HARNet's 128×3 windows)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid choices: {sorted(MODELS)}")
    kwargs = {"width": width or image_size} if "width" in inspect.signature(MODELS[name]).parameters else {}
    return MODELS[name](in_channels=in_channels, num_classes=num_classes, image_size=image_size, **kwargs)


def initialise(model: nn.Module, scheme: str, generator: torch.Generator) -> None:
    """Re-draw ``model``'s weights (its ``extras`` included) by ``scheme`` (``fed.config.INIT_SCHEMES``), from
    ``generator``."""
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"unknown init {scheme!r}; valid choices: {list(INIT_SCHEMES)}")
    if scheme == "xavier_relu":
        gain = nn.init.calculate_gain("relu")
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight, gain=gain, generator=generator)


__all__ = ["MODELS", "SplitModel", "build_model", "initialise"]
