"""FedData: the raw-data-sharing reference of FLea (and DA-FL's idea taken to the limit). Before training, every
client shares a fraction α of its samples (⌈α·n_k⌉, without replacement); the server gathers the shares and sends
them to the clients, and each client trains on its own data mixed with the gathered data (FLea App. C). With
``own_share`` false a client receives only the other clients' shares (its own shared samples are not duplicated)."""

from __future__ import annotations

import torch

from fed.algorithms.base import Algorithm
from fed.sharing import share_subset


class FedData(Algorithm):
    name = "feddata"
    vectorise = True

    def __init__(self, share_fraction: float = 0.1, own_share: bool = True):
        if not 0 < share_fraction <= 1:
            raise ValueError(f"FedData: share_fraction must be in (0, 1], got {share_fraction}")
        self.share_fraction, self.own_share = share_fraction, own_share

    def setup(self, ctx):
        shares = [
            share_subset(len(ctx.train_idx[k]), self.share_fraction, ctx.rng("share", k))
            for k in range(ctx.num_clients)
        ]
        self.pool = [ctx.train_idx[k][s] for k, s in enumerate(shares)]  # dataset indices, per owner
        ctx.share("raw_samples", sum(len(p) for p in self.pool))

    def training_indices(self, ctx, client) -> torch.Tensor:
        received = [p for k, p in enumerate(self.pool) if self.own_share or k != client]
        return torch.cat([ctx.train_idx[client], *received])

    def client_update(self, ctx, client):
        ctx.model.load_state_dict(ctx.global_state)
        return self.train_locally(ctx, client, *ctx.samples(self.training_indices(ctx, client)))
