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
