"""The algorithm interface: the engine owns the round loop; a method overrides only the hooks it needs.

Hooks, in the order the engine calls them (see docs/architecture.md for how every planned method plugs in):

- ``setup(ctx)``                       once before the first round (pre-training stages, one-off sharing)
- ``select_clients(ctx)``               which clients train this round (default: a fraction, uniformly)
- ``client_update(ctx, client)``        one client's local training (default: ``train_locally`` on its data)
- ``local_loss(model, x, y, local, ctx)``  the per-batch objective (default: cross-entropy)
- ``aggregate(ctx, results)``           new global state (default: mean of parameters and BN buffers)
- ``server_update(ctx, model, results)`` after aggregation (server-side training, calibration, buffers)

``ctx`` is the :class:`fed.engine.Engine`: it gives the config (``ctx.cfg``), the round (``ctx.round``), the
working model (``ctx.model``), the global state (``ctx.global_state``), client data, named RNG streams
(``ctx.rng``), and ``ctx.client_store`` — per-client persistent state that is checkpointed with the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from fed.engine import Engine

State = dict[str, torch.Tensor]


@dataclass
class LocalContext:
    """What one client's local training knows: its id, its persistent store, the round's global parameters."""

    client: int
    store: dict[str, Any]
    global_params: list[torch.Tensor]


@dataclass
class ClientResult:
    client: int
    state: State
    num_samples: int
    train_loss: float
    extra: dict[str, Any] = field(default_factory=dict)


class Algorithm:
    """FedAvg behaviour for every hook; subclasses override what their paper changes."""

    name = "base"
    # Rounds before this one are exactly FedAvg (same updates, same random streams), so a run may warm-start
    # from a FedAvg checkpoint taken before it (start-round ablations).
    fedavg_until: float = 1

    def setup(self, ctx: Engine) -> None:
        """Once before round 1."""

    def select_clients(self, ctx: Engine) -> list[int]:
        return ctx.sample_clients()

    def local_loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, local: LocalContext, ctx: Engine):
        return F.cross_entropy(model(x), y)

    def client_update(self, ctx: Engine, client: int) -> ClientResult:
        """Load the global state, then train on the client's local data."""
        ctx.model.load_state_dict(ctx.global_state)
        x, y = ctx.client_train_data(client)
        return self.train_locally(ctx, client, x, y)

    def train_locally(self, ctx: Engine, client: int, x: torch.Tensor, y: torch.Tensor) -> ClientResult:
        """``local_epochs`` of mini-batch SGD over ``local_loss`` on (x, y), from the state ``ctx.model`` holds."""
        model = ctx.model
        local = LocalContext(client, ctx.client_store.setdefault(client, {}),
                             [p.detach().clone() for p in model.parameters()])
        loss = ctx.local_sgd(model, x, y, lambda xb, yb: self.local_loss(model, xb, yb, local, ctx),
                             ctx.rng("shuffle", ctx.round, client))
        return ClientResult(client, ctx.state_copy(model), len(y), loss)

    def aggregate(self, ctx: Engine, results: list[ClientResult]) -> State:
        weights = [r.num_samples if ctx.cfg.aggregation == "weighted" else 1.0 for r in results]
        return average_states([r.state for r in results], weights)

    def server_update(self, ctx: Engine, model: nn.Module, results: list[ClientResult]) -> None:
        """After aggregation; ``model`` holds the new global state, and changes to it are kept."""

    # Method state that must survive a checkpoint (e.g. SCAFFOLD's server control variate).
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def average_states(states: list[State], weights: list[float]) -> State:
    """Weighted mean of state dicts: parameters and BN running statistics; integer buffers (BN's
    ``num_batches_tracked``) are averaged and rounded."""
    total = float(sum(weights))
    out: State = {}
    for key, ref in states[0].items():
        acc = sum(s[key].double() * (w / total) for s, w in zip(states, weights))
        out[key] = acc.round().to(ref.dtype) if not ref.is_floating_point() else acc.to(ref.dtype)
    return out
