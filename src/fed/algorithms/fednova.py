"""FedNova (Wang et al., NeurIPS 2020): normalised averaging of local updates by the local work done.

Client i runs τ_i SGD steps with momentum ρ; its normaliser is a_i = [τ_i − ρ(1 − ρ^τ_i)/(1 − ρ)] / (1 − ρ)
(a_i = τ_i for plain SGD). With p_i = n_i / Σ n:
    d_i = (x − y_i) / a_i,   τ_eff = Σ_i p_i a_i,   x ← x − τ_eff Σ_i p_i d_i
BN buffers are averaged with weights p_i.
"""

from __future__ import annotations

from fed.algorithms.base import Algorithm, State
from fed.training import average_states


def normaliser(steps: int, momentum: float) -> float:
    if momentum == 0:
        return float(steps)
    return (steps - momentum * (1 - momentum**steps) / (1 - momentum)) / (1 - momentum)


def fednova_update(
    global_state: State, client_states: list[State], steps: list[int], sizes: list[int], momentum: float, keys: set[str]
) -> State:
    """FedNova's server step on the entries ``keys`` (pure function, tested by hand)."""
    p = [n / sum(sizes) for n in sizes]
    a = [normaliser(t, momentum) for t in steps]
    tau_eff = sum(pi * ai for pi, ai in zip(p, a))
    out = {}
    for k in (k for k in global_state if k in keys):
        x = global_state[k].double()
        d = sum(pi * (x - s[k].double()) / ai for pi, ai, s in zip(p, a, client_states))
        out[k] = (x - tau_eff * d).to(global_state[k].dtype)
    return out


class FedNova(Algorithm):
    name = "fednova"
    vectorise = True

    def aggregate(self, ctx, results) -> State:
        sizes = [r.num_samples for r in results]
        new = average_states([r.state for r in results], sizes)
        new.update(
            fednova_update(
                ctx.global_state,
                [r.state for r in results],
                [r.steps for r in results],
                sizes,
                ctx.cfg.momentum,
                {n for n, _ in ctx.model.named_parameters()},
            )
        )
        return new
