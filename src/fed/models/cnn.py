"""The CNNs of Fed-ZDA (Hao et al., 2021, Sec. 4.1). Both contain BatchNorm, which ZSDG inverts. The cut is after
the convolutional blocks (flattened), before the fully connected layers."""

from __future__ import annotations

from torch import nn

from fed.models.base import SequentialSplit


def _conv_block(cin: int, cout: int, k: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2))


class FedZDAMnistCNN(SequentialSplit):
    """MNIST/FMNIST: conv5x5-16 and conv5x5-32, each BN + ReLU + 2x2 max-pool, then one FC layer."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, image_size: int = 28):
        super().__init__(
            nn.Sequential(_conv_block(in_channels, 16, 5), _conv_block(16, 32, 5), nn.Flatten()),
            nn.Linear(32 * (image_size // 4) ** 2, num_classes),
            cut_layer="body.2",
        )


class FedZDACifarCNN(SequentialSplit):
    """CIFAR-10: two conv3x3-16, each BN + ReLU + 2x2 max-pool, then FC 80, FC 60 and the output layer."""

    def __init__(self, in_channels: int = 3, num_classes: int = 10, image_size: int = 32):
        super().__init__(
            nn.Sequential(_conv_block(in_channels, 16, 3), _conv_block(16, 16, 3), nn.Flatten()),
            nn.Sequential(
                nn.Linear(16 * (image_size // 4) ** 2, 80),
                nn.ReLU(),
                nn.Linear(80, 60),
                nn.ReLU(),
                nn.Linear(60, num_classes),
            ),
            cut_layer="body.2",
        )


class DAFLCNN(SequentialSplit):
    """DA-FL's classifier (Tang et al. 2023, Sec. 4.1): 2 convolutions, each followed by max-pooling and ReLU, then
    2 fully connected layers. Widths are in Fig. 3 only; we take LeNet-like ones: conv5x5-16, conv5x5-32, unpadded,
    FC 128 (docs/deviations.md); ``scale`` multiplies all three (the width study: ``cnn_dafl_half``, ``_quarter``)."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, image_size: int = 28, scale: float = 1.0):
        side = ((image_size - 4) // 2 - 4) // 2
        c1, c2, fc = (max(1, round(n * scale)) for n in (16, 32, 128))
        super().__init__(
            nn.Sequential(
                nn.Conv2d(in_channels, c1, 5),
                nn.MaxPool2d(2),
                nn.ReLU(),
                nn.Conv2d(c1, c2, 5),
                nn.MaxPool2d(2),
                nn.ReLU(),
                nn.Flatten(),
            ),
            nn.Sequential(nn.Linear(c2 * side * side, fc), nn.ReLU(), nn.Linear(fc, num_classes)),
            cut_layer="body.6",
        )
