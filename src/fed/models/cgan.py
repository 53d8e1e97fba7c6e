"""DA-FL's conditional GAN (Tang et al. 2023, Sec. 4.1 and Fig. 3). The text fixes the shape of it: a generator of
4 transposed convolutions (10-d Gaussian noise + a label embedding → a 32×32 image, ReLU inside), a discriminator of
4 convolutions (a 32×32 image + a label embedding → one score, LeakyReLU inside), instance normalisation without
running statistics in both (batch statistics would break per-sample DP, Sec. 3.3). Channel widths, kernels and
strides live only in Fig. 3, which the text does not reproduce: we take the DCGAN ladder (4×4 kernels, stride 2,
widths 256/128/64), recorded in docs/deviations.md. Colour datasets get ``channels=3``: the generator emits the
dataset's own channels and the discriminator reads them; 28×28 data are resized to 32×32 on the way in and out.
"""

from __future__ import annotations

import torch
from torch import nn


def _norm(channels: int) -> nn.InstanceNorm2d:
    # affine, no running statistics: per-sample, so Opacus can clip each sample's gradient (Sec. 3.3)
    return nn.InstanceNorm2d(channels, affine=True, track_running_stats=False)


class Generator(nn.Module):
    """G(z, y): noise (noise_dim) and label embedding → 32×32 image in [-1, 1]."""

    def __init__(self, num_classes: int = 10, channels: int = 1, noise_dim: int = 10, width: int = 64):
        super().__init__()
        self.noise_dim = noise_dim
        self.embed = nn.Embedding(num_classes, noise_dim)
        w = width
        self.net = nn.Sequential(
            nn.ConvTranspose2d(2 * noise_dim, 4 * w, 4, 1, 0),  # 1 → 4
            _norm(4 * w),
            nn.ReLU(),
            nn.ConvTranspose2d(4 * w, 2 * w, 4, 2, 1),  # 4 → 8
            _norm(2 * w),
            nn.ReLU(),
            nn.ConvTranspose2d(2 * w, w, 4, 2, 1),  # 8 → 16
            _norm(w),
            nn.ReLU(),
            nn.ConvTranspose2d(w, channels, 4, 2, 1),  # 16 → 32
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = torch.cat([z, self.embed(y)], dim=1)
        return self.net(h[:, :, None, None])


class Discriminator(nn.Module):
    """D(x, y): 32×32 image with its label embedded as one extra 32×32 plane → a real/fake logit per sample."""

    def __init__(self, num_classes: int = 10, channels: int = 1, width: int = 64):
        super().__init__()
        self.embed = nn.Embedding(num_classes, 32 * 32)
        w = width
        self.net = nn.Sequential(
            nn.Conv2d(channels + 1, w, 4, 2, 1),  # 32 → 16
            nn.LeakyReLU(0.2),
            nn.Conv2d(w, 2 * w, 4, 2, 1),  # 16 → 8
            _norm(2 * w),
            nn.LeakyReLU(0.2),
            nn.Conv2d(2 * w, 4 * w, 4, 2, 1),  # 8 → 4
            _norm(4 * w),
            nn.LeakyReLU(0.2),
            nn.Conv2d(4 * w, 1, 4, 1, 0),  # 4 → 1
            nn.Flatten(),
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        plane = self.embed(y).view(-1, 1, 32, 32)
        return self.net(torch.cat([x, plane], dim=1)).squeeze(1)
