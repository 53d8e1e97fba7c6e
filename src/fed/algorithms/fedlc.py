"""FedLC (Zhang et al., ICML 2022): federated learning with label-distribution-aware logit calibration.

    ℓ = −log( e^{z_y − τ n_y^{−1/4}} / Σ_c e^{z_c − τ n_c^{−1/4}} ),   n_c: the client's count of class c
n_c = 0 is undefined; ``absent`` picks a code's rule: ``floor`` (FL-bench: n_c ≥ 1e-8, an absent class's logit
drops by 100 τ) or ``offset`` (FLea's baseline code, ``myuser.py``: n_c + 1e-6 for every class, a drop of 31.6 τ).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fed.algorithms.base import Algorithm

ABSENT = {"floor": lambda n: n.clamp_min(1e-8), "offset": lambda n: n + 1e-6}


def calibrated_logits(logits: torch.Tensor, counts: torch.Tensor, tau: float, absent: str = "floor") -> torch.Tensor:
    return logits - tau * ABSENT[absent](counts).pow(-0.25)


class FedLC(Algorithm):
    name = "fedlc"
    vectorise = True

    def __init__(self, tau: float = 1.0, absent: str = "floor"):
        if absent not in ABSENT:
            raise ValueError(f"FedLC: absent must be one of {sorted(ABSENT)}, got {absent!r}")
        self.tau, self.absent = tau, absent

    def client_update(self, ctx, client):
        ctx.model.load_state_dict(ctx.global_state)
        x, y = ctx.client_data(client)
        counts = torch.bincount(y, minlength=ctx.num_classes).to(x.dtype)
        return self.train_locally(ctx, client, x, y, extra={"counts": counts})

    def local_loss(self, model, x, y, local, ctx):
        return F.cross_entropy(calibrated_logits(model(x), local.extra["counts"], self.tau, self.absent), y)
