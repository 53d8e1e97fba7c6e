"""FedAvg with FedData's local steps (docs/headtohead-protocol.md, section 4): FedAvg on the client's own data only,
for as many epochs as make its local steps at least those FedData's client takes on its own data plus the gathered
shares, so that FedData − FedAvg (step-matched) is the gain of sharing data and FedAvg (step-matched) − FedAvg the gain
of more steps.

With FedData's ``share_fraction`` α and ``own_share``, client k of n_k records receives S_k = Σ_j ⌈α·n_j⌉ records (j
over every client, or every other one), and with B the batch size and E the local epochs it trains

    E_k = ⌈ E·⌈(n_k + S_k)/B⌉ / ⌈n_k/B⌉ ⌉ epochs,

computed from the partition before training (no result is read)."""

from __future__ import annotations

import math

from fed.algorithms.base import Algorithm
from fed.sharing import share_size


class FedAvgMatched(Algorithm):
    name = "fedavg_matched"
    vectorise = True

    def __init__(self, share_fraction: float = 0.1, own_share: bool = True):
        if not 0 < share_fraction <= 1:
            raise ValueError(f"fedavg_matched: share_fraction must be in (0, 1], got {share_fraction}")
        self.share_fraction, self.own_share = share_fraction, own_share

    def epochs(self, ctx, client: int) -> int:
        """E_k: FedData's local steps for this client, in epochs of its own data (rounded up)."""
        sizes, b = ctx.client_sizes(), ctx.cfg.batch_size
        shares = [share_size(n, self.share_fraction) for n in sizes]  # what FedData's clients share
        n = sizes[client]
        received = sum(shares) - (0 if self.own_share else shares[client])
        return math.ceil(ctx.cfg.local_epochs * math.ceil((n + received) / b) / math.ceil(n / b))

    def client_update(self, ctx, client):
        ctx.model.load_state_dict(ctx.global_state)
        return self.train_locally(ctx, client, *ctx.client_data(client), epochs=self.epochs(ctx, client))
