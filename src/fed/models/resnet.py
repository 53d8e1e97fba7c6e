"""torchvision ResNets for small images (Fed-ZDA Sec. 4.5 uses ResNet34 on CIFAR-10)."""

from __future__ import annotations

import torchvision
from torch import nn


def resnet(depth: int, in_channels: int = 3, num_classes: int = 10, image_size: int = 32) -> nn.Module:
    """torchvision's ResNet with, for images of 64 px or less, the usual CIFAR stem (3x3 conv, stride 1, no
    max-pool) instead of the ImageNet one that would shrink 32 px to 1 px before the last stage."""
    model = getattr(torchvision.models, f"resnet{depth}")(weights=None, num_classes=num_classes)
    if image_size <= 64:
        model.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    elif in_channels != 3:
        model.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
    return model
