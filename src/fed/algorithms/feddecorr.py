"""FedDecorr (Shi et al., ICLR 2023): against dimensional collapse, penalise correlated feature dimensions.

ẑ = standardised features of the batch (per dimension),  K = ẑᵀẑ / N,  L_decorr = ‖K‖_F² / d²  (= ‖ẑẑᵀ/N‖_F² / d²)
loss = CE + β L_decorr
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fed.algorithms.base import Algorithm


def decorrelation_loss(z: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    z = z.flatten(1)
    n, d = z.shape
    z = (z - z.mean(0)) / torch.sqrt(z.var(0, unbiased=False) + eps)
    # ‖zᵀz‖_F = ‖zzᵀ‖_F: the N×N Gram matrix gives ‖K‖_F² without the d×d one (d = 16,384 at FLea's CIFAR cut)
    gram = z @ z.T / n
    return gram.pow(2).sum() / d**2


class FedDecorr(Algorithm):
    name = "feddecorr"

    def __init__(self, beta: float = 0.1):
        self.beta = beta

    def local_loss(self, model, x, y, local, ctx):
        z = model.embed(x)  # the penultimate representation
        return F.cross_entropy(model.classify(z), y) + self.beta * decorrelation_loss(z)
