"""Privacy attacks on what a method shares (FLea Sec. 2.4 / 4.4, App. D).

Reconstruction (Fig. 9c): an attacker who holds public data of the task and the shared feature extractor θ[:l]
trains a decoder from features back to inputs; its training error (MSE) shows how much of the input the features
still carry. FLea's distance-correlation loss is meant to raise it. The paper (App. D): a decoder of "four conv2d
layers", 20 epochs, learning rate 0.001, CIFAR-10's training set. The authors' ``Test_reconstruction.py`` (XTxiatong/
FLea @ ee3947f): ``MinimalDecoder`` (models.py l. 356: 1×1 conv, 3×3 transposed conv stride 2, 3×3 conv stride 2,
1×1 conv, no activation) trained by SGD (momentum 0.9, weight decay 5e-4) on batches of 128 (the defaults;
``kind="ours"``, ``optimizer="adam"``, ``batch=64`` give the earlier deeper, non-linear decoder trained by Adam).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


class FeatureDecoder(nn.Module):
    """Features → input. ``kind="ours"``: a 3×3 conv, stride-2 transposed convs up to the input's resolution, a 3×3
    conv to the input's channels, ReLUs between (4 conv layers for a cut at 1/4 resolution, 2 at full resolution).
    ``kind="code"``: the authors' ``MinimalDecoder``, 4 linear conv layers at the map's resolution (1×1, 3×3
    transposed stride 2, 3×3 stride 2, 1×1). Flat features first go through a linear layer to a map at 1/4 of the
    input's size; a map smaller than the input is upsampled bilinearly at the end. Output in the input's
    (normalised) space."""

    def __init__(
        self, feature_shape: tuple[int, ...], input_shape: tuple[int, int, int], width: int = 32, kind: str = "code"
    ):
        super().__init__()
        channels, height, wide = input_shape
        if len(feature_shape) == 1:  # a vector: unflatten at 1/4 resolution
            h, w = math.ceil(height / 4), math.ceil(wide / 4)
            self.stem = nn.Sequential(nn.Linear(feature_shape[0], width * h * w), nn.Unflatten(1, (width, h, w)))
            c_in = width
        else:
            c_in, h, w = feature_shape
            self.stem = nn.Identity()
        if kind == "code":
            layers: list[nn.Module] = [
                nn.Conv2d(c_in, width, 1),
                nn.ConvTranspose2d(width, width, 3, stride=2, padding=1, output_padding=1),
                nn.Conv2d(width, width, 3, stride=2, padding=1),
                nn.Conv2d(width, channels, 1),
            ]
        elif kind == "ours":
            ups = max(0, round(math.log2(max(height / h, wide / w))))
            layers = [nn.Conv2d(c_in, width, 3, padding=1), nn.ReLU()]
            for _ in range(ups):
                layers += [nn.ConvTranspose2d(width, width, 4, stride=2, padding=1), nn.ReLU()]
            layers.append(nn.Conv2d(width, channels, 3, padding=1))
        else:
            raise ValueError(f"decoder kind must be 'ours' or 'code', got {kind!r}")
        self.net, self.size = nn.Sequential(*layers), (height, wide)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        x = self.net(self.stem(f))
        return x if tuple(x.shape[-2:]) == self.size else F.interpolate(x, self.size, mode="bilinear")


def reconstruction_curve(extract, x: torch.Tensor, epochs: int, generator: torch.Generator, **settings) -> list[float]:
    """The training MSE per epoch (mean over the epoch's batches) of the attacker ``fit_decoder`` trains with
    ``settings`` (lr, batch, width, kind, optimizer)."""
    return fit_decoder(extract, x, epochs, generator, **settings)[1]


def fit_decoder(
    extract: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    epochs: int,
    generator: torch.Generator,
    lr: float = 1e-3,
    batch: int = 128,
    width: int = 32,
    kind: str = "code",
    optimizer: str = "sgd",
) -> tuple[FeatureDecoder, list[float]]:
    """Train a :class:`FeatureDecoder` (``kind``) on (extract(x), x) with Adam or SGD (``optimizer="sgd"``: the
    code's momentum 0.9, weight decay 5e-4); return it (on ``x``'s device, in eval mode) and its training MSE per
    epoch. The extractor is only queried, never trained (pass a model's ``features`` in eval mode)."""
    with torch.no_grad():
        feats = torch.cat([extract(xb) for xb in x.split(500)])
    torch.manual_seed(int(torch.randint(2**31 - 1, (1,), generator=generator)))
    decoder = FeatureDecoder(tuple(feats.shape[1:]), tuple(x.shape[1:]), width, kind).to(x.device)
    opt = (
        torch.optim.SGD(decoder.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
        if optimizer == "sgd"
        else torch.optim.Adam(decoder.parameters(), lr=lr)
    )
    curve = []
    for _ in range(epochs):
        total = 0.0
        for idx in torch.randperm(len(x), generator=generator).split(batch):
            idx = idx.to(x.device)
            loss = F.mse_loss(decoder(feats[idx]), x[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        curve.append(total / len(x))
    return decoder.eval(), curve


def add_marker(x: torch.Tensor, size: int) -> torch.Tensor:
    """Context marker (FLea Sec. 2.4): a ``size``×``size`` square in the top-left corner at each channel's maximum
    over the batch (a bright, coloured patch in the normalised space)."""
    out = x.clone()
    peak = x.amax(dim=(0, 2, 3), keepdim=True)
    out[..., :size, :size] = peak.expand(len(x), -1, size, size)
    return out


def context_detection(
    represent: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    sizes: list[int],
    generator: torch.Generator,
    marker: int = 4,
    group: int = 1,
    test: int = 1000,
) -> dict[int, float]:
    """FLea Fig. 9(d): held-out accuracy of a logistic-regression attacker that tells marked from unmarked data, by the
    number of representations it trains on (``sizes``). Each representation is ``represent`` of the mean of
    ``group`` images that are all marked or all unmarked (``group`` 10: FedMix's shared averages; 1 with a feature
    extractor: FLea's shared features). Half the representations are marked."""
    from sklearn.linear_model import LogisticRegression

    n = max(sizes) + test
    if n * group > len(x):
        raise ValueError(f"context attack: {n} representations of {group} images need {n * group}, have {len(x)}")
    order = torch.randperm(len(x), generator=generator)[: n * group]
    label = torch.arange(n) % 2  # alternate: every prefix is balanced
    images = x[order].view(n, group, *x.shape[1:])
    images = torch.where(
        label.view(n, 1, 1, 1, 1).bool(), add_marker(images.flatten(0, 1), marker).view_as(images), images
    )
    with torch.no_grad():
        z = torch.cat([represent(b) for b in images.mean(1).split(500)]).flatten(1).numpy()
    y = label.numpy()
    scores = {}
    for m in sizes:
        attacker = LogisticRegression(max_iter=2000).fit(z[:m], y[:m])
        scores[m] = float(attacker.score(z[-test:], y[-test:]))
    return scores
