"""FedLC (Zhang et al., ICML 2022): federated learning with label-distribution-aware logit calibration.

    ℓ = −log( e^{z_y − τ n_y^{−1/4}} / Σ_c e^{z_c − τ n_c^{−1/4}} ),   n_c: the client's count of class c
A class the client does not hold gets n_c = 1e-8 (its logit is pushed far down), as in FL-bench.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fed.algorithms.base import Algorithm


def calibrated_logits(logits: torch.Tensor, counts: torch.Tensor, tau: float) -> torch.Tensor:
    return logits - tau * counts.clamp_min(1e-8).pow(-0.25)


class FedLC(Algorithm):
    name = "fedlc"

    def __init__(self, tau: float = 1.0):
        self.tau = tau

    def client_update(self, ctx, client):
        ctx.model.load_state_dict(ctx.global_state)
        x, y = ctx.client_data(client)
        counts = torch.bincount(y, minlength=ctx.num_classes).to(x.dtype)
        return self.train_locally(ctx, client, x, y, extra={"counts": counts})

    def local_loss(self, model, x, y, local, ctx):
        return F.cross_entropy(calibrated_logits(model(x), local.extra["counts"], self.tau), y)
