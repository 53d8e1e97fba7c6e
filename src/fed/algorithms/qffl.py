"""q-FFL / q-FedAvg (Li et al., ICLR 2020), as in litian96/fair_flearn ``qffedavg.py``.

Client k trains locally from w_t to w_k and reports F_k, its training loss at w_t. With L (default 1/lr):
    Delta_k = L (w_t - w_k)
    h_k     = q F_k^(q-1) ||Delta_k||^2 + L F_k^q
    w_t+1   = w_t - sum_k F_k^q Delta_k / sum_k h_k
q = 0 gives the simple mean of the client models (FedAvg). Applied to trainable parameters; BatchNorm
buffers, which fair_flearn's models do not have, are averaged as in FedAvg (docs/deviations.md).
"""

from __future__ import annotations

import torch

from fed.algorithms.base import Algorithm, ClientResult, State, average_states

EPS = 1e-10  # fair_flearn adds 1e-10 to the loss


class QFFL(Algorithm):
    name = "qffl"
    vectorise = True

    def __init__(self, q: float = 1.0, lipschitz: float | None = None):
        if q < 0:
            raise ValueError(f"q-FFL: q must be >= 0, got {q}")
        if lipschitz is not None and lipschitz <= 0:
            raise ValueError(f"q-FFL: lipschitz must be > 0, got {lipschitz}")
        self.q, self.lipschitz = q, lipschitz

    def client_update(self, ctx, client) -> ClientResult:
        x, y = ctx.client_data(client)
        loss_at_global = ctx.loss_of(ctx.global_state, x, y)
        result = super().client_update(ctx, client)
        result.extra["F"] = loss_at_global
        return result

    def aggregate(self, ctx, results) -> State:
        params = {name for name, _ in ctx.model.named_parameters()}
        new = average_states([r.state for r in results], [1.0] * len(results))  # buffers: simple mean
        new.update(
            qffl_update(
                ctx.global_state,
                [r.state for r in results],
                [r.extra["F"] for r in results],
                self.q,
                self.lipschitz or 1.0 / ctx.round_lr(),
                params,
            )
        )
        return new


def qffl_update(
    global_state: State, client_states: list[State], losses: list[float], q: float, L: float, keys: set[str]
) -> State:
    """The q-FFL server step with Lipschitz estimate ``L`` on the entries ``keys`` of the state dicts (pure
    function, tested by hand)."""
    keys = [k for k in global_state if k in keys]
    numer = {k: torch.zeros_like(global_state[k], dtype=torch.float64) for k in keys}
    h_sum = 0.0
    for state, loss in zip(client_states, losses):
        f = float(loss) + EPS
        deltas = {k: L * (global_state[k].double() - state[k].double()) for k in keys}
        sq_norm = sum(float(d.pow(2).sum()) for d in deltas.values())
        for k in keys:
            numer[k] += f**q * deltas[k]
        h_sum += q * f ** (q - 1) * sq_norm + L * f**q
    return {k: (global_state[k].double() - numer[k] / h_sum).to(global_state[k].dtype) for k in keys}
