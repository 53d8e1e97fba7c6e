"""FedNTD (Lee et al., NeurIPS 2022): preserve the global model's knowledge on the not-true classes.

q̃_τ = softmax over the classes c ≠ y of z/τ, for the local (l) and the round's global (g) model
loss = CE + β τ² KL(q̃_τ^g ‖ q̃_τ^l)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fed.algorithms.base import Algorithm


def not_true(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The logits without the true class's column: (B, C) → (B, C − 1)."""
    others = torch.arange(logits.shape[1] - 1, device=y.device).expand(len(y), -1)
    return logits.gather(1, others + (others >= y[:, None]))  # columns 0..C-1 but y, in order (vmap: no mask)


def not_true_distillation(local_logits, global_logits, y, tau: float) -> torch.Tensor:
    log_p_local = F.log_softmax(not_true(local_logits, y) / tau, dim=1)
    p_global = F.softmax(not_true(global_logits, y) / tau, dim=1)
    return tau**2 * F.kl_div(log_p_local, p_global, reduction="batchmean")


class FedNTD(Algorithm):
    name = "fedntd"
    vectorise = True

    def __init__(self, beta: float = 1.0, tau: float = 1.0):
        self.beta, self.tau = beta, tau

    def local_loss(self, model, x, y, local, ctx):
        logits = model(x)
        with torch.no_grad():
            teacher = ctx.global_model()(x)
        return F.cross_entropy(logits, y) + self.beta * not_true_distillation(logits, teacher, y, self.tau)
