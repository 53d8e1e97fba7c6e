"""Loss terms that several methods share (each one written once, tested by hand in tests/test_baselines.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def one_hot(y: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    """``F.one_hot(y, num_classes).to(dtype)`` without its data-dependent check, so that it runs under ``vmap``."""
    return (y[..., None] == torch.arange(num_classes, device=y.device)).to(dtype)


def soft_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against a distribution per sample (mixed or uniform labels), mean over the batch."""
    return -(target * F.log_softmax(logits, dim=1)).sum(1).mean()


def contrastive_loss(z: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor, tau: float) -> torch.Tensor:
    """MOON's model-contrastive loss (also FedBR's feature term), mean over the batch:
    −log( e^{sim(z,z⁺)/τ} / (e^{sim(z,z⁺)/τ} + e^{sim(z,z⁻)/τ}) ), sim = cosine similarity."""
    pos = F.cosine_similarity(z, positive, dim=1) / tau
    neg = F.cosine_similarity(z, negative, dim=1) / tau
    return F.cross_entropy(torch.stack([pos, neg], dim=1), torch.zeros(len(z), dtype=torch.long, device=z.device))


def _centred_distances(z: torch.Tensor, eps: float) -> torch.Tensor:
    """Double-centred matrix of pairwise Euclidean distances between the rows of ``z`` (rows and columns sum to 0).
    Squared distances are clamped at ``eps`` before the square root (FLea's code), so the diagonal is √eps, not 0,
    and the root stays differentiable."""
    sq = (z * z).sum(1)
    d = (sq[:, None] + sq[None, :] - 2 * z @ z.T).clamp_min(eps).sqrt()
    return d - d.mean(0, keepdim=True) - d.mean(1, keepdim=True) + d.mean()


def distance_correlation(x: torch.Tensor, f: torch.Tensor, squared: bool = False, eps: float = 1e-7) -> torch.Tensor:
    """Székely's (V-statistic) distance correlation between paired samples, rows of ``x`` and ``f`` (any trailing
    shape, flattened): with A, B the double-centred distance matrices and ν²(x, f) = mean(A∘B),
    R = √ν²(x, f) / (ν²(x, x) ν²(f, f))^¼ ∈ [0, 1], with FLea's code's guards (``dist_corr``, myuser.py l. 24):
    R = √(ν²(x,f) + ε) / (√(√(ν²(x,x) + ε) + ε) · √(√(ν²(f,f) + ε) + ε)), ε = 1e-7 (also the clamp of the squared
    distances). Returns R (``squared=False``, the usual "distance correlation", FLea's code) or R² (FLea's Eq. 5/8:
    ν²(x,f)/√(ν²(x,x)ν²(f,f))). ~0 for independent samples (as n → ∞), ~1 when f is a similarity transform of x."""
    a, b = _centred_distances(x.flatten(1).double(), eps), _centred_distances(f.flatten(1).double(), eps)
    v2 = [(u * v).mean().clamp_min(0.0) for u, v in ((a, b), (a, a), (b, b))]
    r = (v2[0] + eps).sqrt() / (((v2[1] + eps).sqrt() + eps).sqrt() * ((v2[2] + eps).sqrt() + eps).sqrt())
    r = r.to(x.dtype)
    return r * r if squared else r
