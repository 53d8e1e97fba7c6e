"""torchvision ResNets for small images (Fed-ZDA Sec. 4.5 uses ResNet34 on CIFAR-10), cut before ``fc``."""

from __future__ import annotations

import torch
from torch import nn

from fed.models.base import SplitModel


class ResNet(SplitModel):
    """torchvision's ResNet with, for images of 64 px or less, the usual CIFAR stem (3x3 conv, stride 1, no
    max-pool) instead of the ImageNet one that would shrink 32 px to 1 px before the last stage."""

    cut_layer = "net.avgpool"

    def __init__(self, depth: int, in_channels: int = 3, num_classes: int = 10, image_size: int = 32):
        import torchvision  # here, not at module level: importing torchvision costs every job ~2 s

        super().__init__()
        net = getattr(torchvision.models, f"resnet{depth}")(weights=None, num_classes=num_classes)
        if image_size <= 64:
            net.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
            net.maxpool = nn.Identity()
        elif in_channels != 3:
            net.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        self.net = net

    def features(self, x):
        n = self.net
        x = n.maxpool(n.relu(n.bn1(n.conv1(x))))
        x = n.layer4(n.layer3(n.layer2(n.layer1(x))))
        return torch.flatten(n.avgpool(x), 1)

    def head(self, h):
        return self.net.fc(h)

    def head_module(self):
        return self.net.fc


def resnet(depth: int, in_channels: int = 3, num_classes: int = 10, image_size: int = 32) -> ResNet:
    return ResNet(depth, in_channels, num_classes, image_size)
