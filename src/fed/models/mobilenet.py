"""MobileNetV2 for 32 px images (FLea's CIFAR-10 model), built on torchvision's ``MobileNetV2``.

CIFAR variant as in the widely used kuangliu/pytorch-cifar port that FLea's code follows: the stem convolution
has stride 1 and the second stage (24 channels) stride 1, so a 32 px input reaches the last stage at 4 px.
``cut`` indexes torchvision's ``features`` (0 = stem, 1..17 = inverted-residual blocks, 18 = the 1x1 conv to
1280 channels): ``features(x)`` returns the output of ``features[cut]`` (pooled and flattened when the cut is
the last layer). FLea's ``--layer 0`` — the first inverted-residual block, 16x32x32 — is ``cut=1``.
"""

from __future__ import annotations

import torch
from torch import nn

from fed.models.base import SplitModel

CIFAR_SETTING = [
    [1, 16, 1, 1],
    [6, 24, 2, 1],
    [6, 32, 3, 2],
    [6, 64, 4, 2],
    [6, 96, 3, 1],
    [6, 160, 3, 2],
    [6, 320, 1, 1],
]


class MobileNetV2(SplitModel):
    def __init__(self, in_channels: int = 3, num_classes: int = 10, image_size: int = 32, cut: int | None = None):
        import torchvision  # here, not at module level: importing torchvision costs every job ~2 s
        from torchvision.ops.misc import Conv2dNormActivation

        super().__init__()
        net = torchvision.models.MobileNetV2(
            num_classes=num_classes, inverted_residual_setting=CIFAR_SETTING, dropout=0.0
        )
        net.features[0] = Conv2dNormActivation(
            in_channels, 32, stride=1, norm_layer=nn.BatchNorm2d, activation_layer=nn.ReLU6
        )
        self.net = net
        last = len(net.features) - 1
        self.cut = last if cut is None else cut
        if not 0 <= self.cut <= last:
            raise ValueError(f"MobileNetV2 cut must be in 0..{last}, got {cut}")
        self.cut_layer = f"net.features.{self.cut}"

    def _pooled(self, x):
        return torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)

    def features(self, x):
        h = self.net.features[: self.cut + 1](x)
        return self._pooled(h) if self.cut == len(self.net.features) - 1 else h

    def head(self, h):
        if self.cut < len(self.net.features) - 1:
            h = self._pooled(self.net.features[self.cut + 1 :](h))
        return self.net.classifier(h)

    def head_module(self):
        if self.cut < len(self.net.features) - 1:
            return nn.ModuleList([self.net.features[self.cut + 1 :], self.net.classifier])
        return self.net.classifier

    def embed(self, x):
        return self._pooled(self.net.features(x))

    def classifier_module(self):
        return self.net.classifier
