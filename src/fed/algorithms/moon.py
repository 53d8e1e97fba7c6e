"""MOON (Li, He & Song, CVPR 2021): model-contrastive federated learning.

    z = P(features(x)) for the local model, z_glob for the round's global model, z_prev for the client's model
    of its previous round;  ℓ_con = −log( e^{sim(z,z_glob)/τ} / (e^{sim(z,z_glob)/τ} + e^{sim(z,z_prev)/τ}) )
    loss = CE + μ ℓ_con

P is MOON's projection head (two linear layers with ReLU), trained and aggregated with the model. The previous
local model is per-client state on disk; before a client's first participation it is the global model.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

from fed.algorithms.base import Algorithm
from fed.losses import contrastive_loss
from fed.models.base import feature_dim
from fed.training import state_copy


class Projected(nn.Module):
    """x ↦ z = P(features(x)) of ``model``: what MOON contrasts, as a module ``functional_call`` can evaluate with
    another state (the client's previous model)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        return Moon.project(self.model, x)[1]


class Moon(Algorithm):
    name = "moon"
    vectorise = True

    def __init__(self, mu: float = 5.0, tau: float = 0.5, projection_dim: int = 256):
        self.mu, self.tau, self.projection_dim = mu, tau, projection_dim
        self._prev: Projected | None = None  # evaluated with each client's previous state (local.extra["prev"])

    def extra_modules(self, model, input_shape):
        d = self.projection_dim
        return {"projection": nn.Sequential(nn.Linear(feature_dim(model, input_shape), d), nn.ReLU(), nn.Linear(d, d))}

    @staticmethod
    def project(model, x):
        h = model.features(x)
        return h, model.extras["projection"](h.flatten(1))

    def local_loss(self, model, x, y, local, ctx):
        h, z = self.project(model, x)
        with torch.no_grad():
            z_glob = self.project(ctx.global_model(), x)[1]
            prev = {f"model.{k}": v for k, v in local.extra["prev"].items()}
            z_prev = functional_call(self._prev, prev, (x,), tie_weights=False)
        ce = nn.functional.cross_entropy(model.head(h), y)
        return ce + self.mu * contrastive_loss(z, z_glob, z_prev, self.tau)

    def client_update(self, ctx, client):
        if self._prev is None:
            self._prev = Projected(ctx.new_model()).eval().requires_grad_(False)
        prev = ctx.load_client_state(client).get("prev") or ctx.global_state
        ctx.model.load_state_dict(ctx.global_state)
        result = self.train_locally(ctx, client, *ctx.client_data(client), extra={"prev": prev})
        ctx.save_client_state(client, {"prev": state_copy(ctx.model)})
        return result
