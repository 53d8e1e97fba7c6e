"""FedDPMS' networks (Chen & Vikalo 2023; layer sizes from the official code, CityChan/Federated-DPMS ``models.py``).

The classifier every FedDPMS-preset method trains is the VAE's encoder trunk plus its classifier:
``features(x)`` = the convolutional encoder E (flattened), ``head`` = Linear(·, code) → Linear(code, classes).
FedDPMS adds the VAE's other parts as ``extras`` (``vae_modules``): the latent mean and log-variance heads
(Mu, LogVar) and the decoder. The data representation it shares is Mu(E(x)).
"""

from __future__ import annotations

from torch import nn

from fed.models.base import SequentialSplit


def _conv(cin: int, cout: int, pool: bool, dropout: float, bias: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, 3, padding=1, bias=bias), nn.PReLU(), nn.BatchNorm2d(cout)]
    if pool:
        layers += [nn.MaxPool2d(2), nn.Dropout(dropout)]
    return nn.Sequential(*layers)


class DPMSCNN(SequentialSplit):
    """Encoder trunk + classifier. FMNIST: conv32 (no bias), conv32 + pool, conv64 + pool, dropout 0 (the code's
    FMNIST script). CIFAR: conv32, conv32 + pool, conv64, conv64 + pool, dropout 0.2. Each conv: 3×3, PReLU, BN."""

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: int = 28,
        widths: tuple[int, ...] = (32, 32, 64),
        pools: tuple[int, ...] = (1, 2),
        dropout: float = 0.0,
        code_length: int = 32,
        cut: int | None = None,
    ):
        blocks, cin = [], in_channels
        for i, w in enumerate(widths):
            blocks.append(_conv(cin, w, i in pools, dropout, bias=i > 0))
            cin = w
        side = image_size // 2 ** len(pools)
        linear = [nn.Linear(cin * side * side, code_length), nn.Linear(code_length, num_classes)]
        if cut is None:  # the VAE's trunk: every conv block, flattened
            super().__init__(nn.Sequential(*blocks, nn.Flatten()), nn.Sequential(*linear), f"body.{len(blocks)}")
        else:  # after conv block ``cut`` (FLea's intermediate cut); the later blocks are in the head
            if not 0 < cut < len(blocks):
                raise ValueError(f"cut must be in [1, {len(blocks) - 1}], got {cut}")
            head = nn.Sequential(*blocks[cut:], nn.Flatten(), *linear)
            super().__init__(nn.Sequential(*blocks[:cut]), head, f"body.{cut - 1}")
        self.cut = cut
        self.trunk_shape = (cin, side, side)


def fmnist_cnn(in_channels: int = 1, num_classes: int = 10, image_size: int = 28) -> DPMSCNN:
    return DPMSCNN(in_channels, num_classes, image_size, (32, 32, 64), (1, 2), 0.0, 32)


def fmnist_cnn_block2(in_channels: int = 1, num_classes: int = 10, image_size: int = 28) -> DPMSCNN:
    """``fmnist_cnn`` cut after its second conv block (32 × 14 × 14): FLea's kind of cut, an intermediate block."""
    return DPMSCNN(in_channels, num_classes, image_size, (32, 32, 64), (1, 2), 0.0, 32, cut=2)


def cifar_cnn(in_channels: int = 3, num_classes: int = 10, image_size: int = 32) -> DPMSCNN:
    return DPMSCNN(in_channels, num_classes, image_size, (32, 32, 64, 64), (1, 3), 0.2, 128)


class Decoder(nn.Module):
    """Latent z → image, mirroring the trunk: Linear to the trunk's (64, s/4, s/4), a 3×3 transposed conv, then two
    stride-2 transposed convs up to (channels, s, s). The output is in the normalised input space (no sigmoid:
    the code's sigmoid-squashed inputs are not used, docs/deviations.md)."""

    def __init__(self, code_length: int, trunk_shape: tuple[int, int, int], out_channels: int):
        super().__init__()
        c, h, w = trunk_shape
        self.trunk_shape = trunk_shape
        self.dense = nn.Linear(code_length, c * h * w)
        self.deconv = nn.Sequential(
            nn.ConvTranspose2d(c, c, 3, padding=1),
            nn.PReLU(),
            nn.BatchNorm2d(c),
            nn.ConvTranspose2d(c, 32, 3, stride=2, padding=1, output_padding=1),
            nn.PReLU(),
            nn.BatchNorm2d(32),
            nn.ConvTranspose2d(32, out_channels, 3, stride=2, padding=1, output_padding=1),
        )

    def forward(self, z):
        return self.deconv(self.dense(z).view(len(z), *self.trunk_shape))


def vae_modules(model: DPMSCNN, input_shape: tuple[int, ...]) -> dict[str, nn.Module]:
    """The VAE parts FedDPMS adds to the classifier: Mu and LogVar on the flattened trunk, and the decoder; the
    latent size is the classifier's bottleneck (the code's ``code_len``: 32 FMNIST, 128 CIFAR)."""
    if not isinstance(model, DPMSCNN) or model.cut is not None:
        raise ValueError(
            f"FedDPMS needs a VAE trunk (model cnn_dpms_fmnist or cnn_dpms_cifar), got {type(model).__name__}"
        )
    d, code_length = model.classifier[0].in_features, model.classifier[0].out_features
    return {
        "mu": nn.Linear(d, code_length),
        "logvar": nn.Linear(d, code_length),
        "decoder": Decoder(code_length, model.trunk_shape, input_shape[0]),
    }
