"""FLea's audio and sensor models (Xia et al., KDD 2024, Sec. 4.1 and App. C), cut where FLea shares features.

- ``AudioNet`` (UrbanSound8K, 2×64×344 log-mel input): 4 blocks of Conv → ReLU → BatchNorm (8, 16, 32, 64 channels,
  stride 2; kernel 5 then 3), global average pooling, one FC layer. Any (C, H, W) input works, so the same net is our
  Fashion-MNIST stand-in's model.
- ``HARNet`` (UCI-HAR, one 128×3 window of body acceleration): 4 blocks of Conv → BatchNorm → ReLU over time only
  (kernels 3×1 stride 3, then 6×1 stride 2; 64, 128, 256, 256 channels), flattened into one FC layer.

``cut`` is the block whose output ``features`` returns (FLea's code: ``--layer 1`` for both, the second block).
"""

from __future__ import annotations

import torch
from torch import nn

from fed.models.base import SequentialSplit


def _split(blocks: list[nn.Module], tail: list[nn.Module], cut: int) -> tuple[nn.Sequential, nn.Sequential]:
    if not 0 <= cut < len(blocks):
        raise ValueError(f"cut must be in 0..{len(blocks) - 1}, got {cut}")
    return nn.Sequential(*blocks[: cut + 1]), nn.Sequential(*blocks[cut + 1 :], *tail)


class AudioNet(SequentialSplit):
    def __init__(self, in_channels: int = 2, num_classes: int = 10, image_size: int = 64, cut: int = 1):
        widths, blocks = [in_channels, 8, 16, 32, 64], []
        for i in range(4):
            conv = nn.Conv2d(widths[i], widths[i + 1], 5 if i == 0 else 3, stride=2, padding=2 if i == 0 else 1)
            nn.init.kaiming_normal_(conv.weight, a=0.1)
            nn.init.zeros_(conv.bias)
            blocks.append(nn.Sequential(conv, nn.ReLU(), nn.BatchNorm2d(widths[i + 1])))
        body, head = _split(blocks, [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes)], cut)
        super().__init__(body, head, cut_layer=f"body.{cut}")


class HARNet(SequentialSplit):
    def __init__(self, in_channels: int = 1, num_classes: int = 6, image_size: int = 128, width: int = 3, cut: int = 1):
        widths, blocks = [in_channels, 64, 128, 256, 256], []
        for i in range(4):
            k, s = ((3, 1), (3, 1)) if i == 0 else ((6, 1), (2, 1))
            conv = nn.Conv2d(widths[i], widths[i + 1], k, stride=s, padding=1)
            blocks.append(nn.Sequential(conv, nn.BatchNorm2d(widths[i + 1]), nn.ReLU()))
        with torch.no_grad():
            flat = nn.Sequential(*blocks)(torch.zeros(1, in_channels, image_size, width)).numel()
        body, head = _split(blocks, [nn.Flatten(), nn.Linear(flat, num_classes)], cut)
        super().__init__(body, head, cut_layer=f"body.{cut}")
