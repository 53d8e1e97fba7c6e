"""FedDecorr (Shi et al., ICLR 2023): against dimensional collapse, penalise correlated feature dimensions.

On a batch of N penultimate representations z (d dimensions), standardised per dimension to ẑ:

- ``form: code`` (default; the authors' ``loss.py``, which FLea's code copies): unbiased variance, eps 1e-8 under
  the square root, C = ẑᵀẑ (not divided by N), the mean of its d(d − 1) squared off-diagonal entries, divided by N;
  0 for a batch of one:   L = Σ_{i≠j} C_ij² / (d(d − 1) N)   (= (N − 1)²/N · mean_{i≠j} ρ_ij², ρ the correlations)
- ``form: paper``: K = ẑᵀẑ / N with the population variance (K = ρ), L = ‖K‖_F² / d² (diagonal included).

At N = 32, d = 1280 the code's gradient is (N − 1)² d / (N (d − 1)) ≈ 30 times the paper form's.
loss = CE + β L
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fed.algorithms.base import Algorithm


def decorrelation_loss(z: torch.Tensor, form: str = "code", eps: float = 1e-8) -> torch.Tensor:
    z = z.flatten(1)
    n, d = z.shape
    if form == "code" and (n == 1 or d == 1):  # the authors return 0 for N = 1 (d = 1 has no off-diagonal)
        return z.sum() * 0
    z = z - z.mean(0)
    z = z / torch.sqrt(z.var(0, unbiased=form == "code") + eps)
    # ‖zᵀz‖_F = ‖zzᵀ‖_F: the N×N Gram matrix where it is the smaller (d = 16,384 at FLea's CIFAR cut)
    frob = (z.T @ z if d <= n else z @ z.T).pow(2).sum()
    if form == "paper":
        return frob / n**2 / d**2
    diagonal = z.pow(2).sum(0).pow(2).sum()
    return (frob - diagonal) / (d * (d - 1)) / n


class FedDecorr(Algorithm):
    name = "feddecorr"
    vectorise = True

    def __init__(self, beta: float = 0.1, form: str = "code"):
        if form not in ("code", "paper"):
            raise ValueError(f"feddecorr: form code|paper, got {form!r}")
        self.beta, self.form = beta, form

    def local_loss(self, model, x, y, local, ctx):
        z = model.embed(x)  # the penultimate representation
        return F.cross_entropy(model.classify(z), y) + self.beta * decorrelation_loss(z, self.form)
