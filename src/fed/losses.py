"""Loss terms that several methods share (each one written once, tested by hand in tests/test_baselines.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def soft_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against a distribution per sample (mixed or uniform labels), mean over the batch."""
    return -(target * F.log_softmax(logits, dim=1)).sum(1).mean()


def contrastive_loss(z: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor, tau: float) -> torch.Tensor:
    """MOON's model-contrastive loss (also FedBR's feature term), mean over the batch:
    −log( e^{sim(z,z⁺)/τ} / (e^{sim(z,z⁺)/τ} + e^{sim(z,z⁻)/τ}) ), sim = cosine similarity."""
    pos = F.cosine_similarity(z, positive, dim=1) / tau
    neg = F.cosine_similarity(z, negative, dim=1) / tau
    return F.cross_entropy(torch.stack([pos, neg], dim=1), torch.zeros(len(z), dtype=torch.long, device=z.device))


def _centred_distances(z: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Double-centred matrix of pairwise Euclidean distances between the rows of ``z`` (rows and columns sum to 0)."""
    sq = (z * z).sum(1)
    d2 = (sq[:, None] + sq[None, :] - 2 * z @ z.T).clamp_min(eps)  # clamp: sqrt stays differentiable at 0
    d = d2.sqrt() * (1 - torch.eye(len(z), device=z.device, dtype=z.dtype))
    return d - d.mean(0, keepdim=True) - d.mean(1, keepdim=True) + d.mean()


def distance_correlation(x: torch.Tensor, f: torch.Tensor, squared: bool = False, eps: float = 1e-12) -> torch.Tensor:
    """Székely's (V-statistic) distance correlation between paired samples, rows of ``x`` and ``f`` (any trailing
    shape, flattened): with A, B the double-centred distance matrices, ν²(x, f) = mean(A∘B) and
    R² = ν²(x, f) / √(ν²(x, x) ν²(f, f)) ∈ [0, 1]. Returns R (``squared=False``, the usual "distance correlation",
    FLea's code) or R² (FLea's Appendix Eq. 8 read literally). 0 for independent samples (as n → ∞), 1 when f is a
    similarity transform of x (scaling, rotation, shift)."""
    a, b = _centred_distances(x.flatten(1).double()), _centred_distances(f.flatten(1).double())
    r2 = (a * b).mean() / ((a * a).mean() * (b * b).mean()).sqrt().clamp_min(eps)
    r2 = r2.clamp(0.0, 1.0).to(x.dtype)
    return r2 if squared else r2.clamp_min(eps).sqrt()
