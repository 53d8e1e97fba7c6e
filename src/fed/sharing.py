"""What clients share before training (FedMix/FedBR mean batches, FedData raw samples), drawn from seeded streams.

Every helper returns what left a client, so the run's privacy ledger can count it (``Context.ledger``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def mean_batches(
    x: torch.Tensor, y: torch.Tensor, num_classes: int, size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """FedMix's averaged data: the client's samples in a random order, cut into groups of ``size`` (the last one
    may be smaller), each group replaced by its mean image and mean one-hot label."""
    order = torch.randperm(len(y), generator=generator).to(y.device)
    xs, ys = [], []
    for idx in order.split(size):
        xs.append(x[idx].mean(0))
        ys.append(F.one_hot(y[idx], num_classes).to(x.dtype).mean(0))
    return torch.stack(xs), torch.stack(ys)


def share_subset(n: int, fraction: float, generator: torch.Generator) -> torch.Tensor:
    """Indices of the ``share_size(n, fraction)`` samples a client shares, without replacement."""
    return torch.randperm(n, generator=generator)[: share_size(n, fraction)]


def share_size(n: int, fraction: float) -> int:
    """How many of its n samples a client shares: ``ceil(fraction·n)``, at least one."""
    return min(n, max(1, math.ceil(fraction * n)))
