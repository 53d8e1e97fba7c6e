"""The algorithm interface: the engine owns the round loop; a method overrides only the hooks it needs.

Hooks, in the order the engine calls them (``ctx`` is a :class:`fed.context.Context`, never the engine):

- ``setup(ctx)``                          once before the first round (load stage outputs, one-off sharing)
- ``select_clients(ctx)``                 which clients train this round (default: a fraction, uniformly)
- ``client_update(ctx, client)``          one client's local training (default: ``train_locally`` on its data)
- ``step_draws(model, x, y, local, ctx)`` the random draws of one local step, before it (default: none)
- ``local_loss(model, x, y, local, ctx)`` the per-batch objective (default: cross-entropy)
- ``after_step(model, local, ctx)``       after each local optimiser step (default: nothing; SCAFFOLD's correction)
- ``aggregate(ctx, results)``             the new global state (default: mean of parameters and BN buffers)
- ``server_update(ctx, model, results)``  after aggregation (server-side training, calibration, buffers)

Class attributes declare what a method needs from outside the run: ``stages`` (preparatory DAG nodes, see
``fed.stages``), ``extra_modules`` (trainable parts added to the model, e.g. MOON's projection head).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from fed.stages import Stage
from fed.training import State, average_states, state_copy

if TYPE_CHECKING:
    from fed.context import Context


@dataclass
class LocalContext:
    """What one client's local objective knows: its id, the round's global parameters (in ``model.parameters()``
    order), whatever its method prepared for it (``extra``: control variates, a teacher, class counts) and the
    current step's random draws (``draws``, from ``Algorithm.step_draws``). ``streams`` holds what only
    ``step_draws`` reads (random generators, index pools): a batched round stacks ``extra``, never ``streams``."""

    client: int
    global_params: list[torch.Tensor]
    extra: dict[str, Any] = field(default_factory=dict)
    draws: dict[str, torch.Tensor] = field(default_factory=dict)
    streams: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClientResult:
    client: int
    state: State
    num_samples: int
    train_loss: float
    steps: int = 0  # local SGD steps (FedNova, SCAFFOLD)
    extra: dict[str, Any] = field(default_factory=dict)


class Algorithm:
    """FedAvg behaviour for every hook; subclasses override what their paper changes."""

    name = "base"
    # Rounds before this one are exactly FedAvg (same updates, same random streams), so a run may warm-start
    # from a FedAvg checkpoint taken before it (start-round ablations).
    fedavg_until: float = 1
    # Its clients may train as one batched computation (``vectorise: true``, fed.batched): set once the method's
    # batched and looped rounds are shown equal (tests/test_batched.py)
    vectorise: bool = False

    def extra_modules(self, model: nn.Module, input_shape: tuple[int, ...]) -> dict[str, nn.Module]:
        """Trainable modules this method adds to every model (``model.extras``); aggregated like the rest."""
        return {}

    def stages(self) -> dict[str, Stage]:
        """Preparatory stages this method needs, by name (``ctx.stages[name]`` holds each one's output file).
        ``warm`` is a FedAvg prefix the engine continues from (see ``fed.stages``)."""
        return {}

    def setup(self, ctx: Context) -> None:
        """Once before round 1 (and again on resume: keep it deterministic)."""

    def select_clients(self, ctx: Context) -> list[int]:
        return ctx.sample_clients()

    def step_draws(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, local: LocalContext, ctx: Context
    ) -> dict[str, torch.Tensor]:
        """The random draws one local step's objective takes (a partner per sample, mixing weights, noise), drawn
        just before the step from the client's streams in ``local.extra`` or from torch's global one, in the order
        the objective used to draw them; ``local_loss`` reads them from ``local.draws``. Keeping every draw here,
        outside the objective, lets a batched round (fed.batched) stack its clients' draws. ``model`` gives shapes
        only: in a batched round its weights are not the client's."""
        return {}

    def local_loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, local: LocalContext, ctx: Context):
        return F.cross_entropy(model(x), y)

    def after_step(self, model: nn.Module, local: LocalContext, ctx: Context) -> None:
        """After each local optimiser step: a change to the weights outside the optimiser (and its momentum)."""

    def client_update(self, ctx: Context, client: int) -> ClientResult:
        """Load the global state, then train on the client's local data."""
        ctx.model.load_state_dict(ctx.global_state)
        x, y = ctx.client_data(client)
        return self.train_locally(ctx, client, x, y)

    def train_locally(
        self,
        ctx: Context,
        client: int,
        x: torch.Tensor,
        y: torch.Tensor,
        extra: dict[str, Any] | None = None,
        streams: dict[str, Any] | None = None,
        epochs: int | None = None,
    ) -> ClientResult:
        """``local_epochs`` (or ``epochs``) of mini-batch SGD over ``local_loss`` on (x, y), from the state
        ``ctx.model`` holds."""
        model = ctx.model
        local = LocalContext(client, [p.detach().clone() for p in model.parameters()], extra or {}, {}, streams or {})
        overridden = type(self).after_step is not Algorithm.after_step
        stats = ctx.train(
            model,
            x,
            y,
            self.objective(model, local, ctx),
            ctx.rng("shuffle", ctx.round, client),
            epochs,
            after_step=(lambda: self.after_step(model, local, ctx)) if overridden else None,
            objective=(self, local),
        )
        return ClientResult(client, state_copy(model), len(y), stats.loss, stats.steps)

    def objective(self, model: nn.Module, local: LocalContext, ctx: Context):
        """The loss of one local batch: the step's draws, then ``local_loss`` (what ``ctx.train`` calls)."""

        def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            local.draws = self.step_draws(model, x, y, local, ctx)
            return self.local_loss(model, x, y, local, ctx)

        return loss

    def aggregate(self, ctx: Context, results: list[ClientResult]) -> State:
        return average_states([r.state for r in results], sample_weights(ctx, results))

    def server_update(self, ctx: Context, model: nn.Module, results: list[ClientResult]) -> None:
        """After aggregation; ``model`` holds the new global state, and changes to it are kept."""

    # Method state that must survive a checkpoint (e.g. SCAFFOLD's server control variate).
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def hyperparameters(algorithm: Algorithm) -> dict[str, Any]:
    """The method's settings — public attributes made of plain values, or dataclasses of them (Fed-ZDA's ZSDG
    budget) — which belong to a run's identity. State (tensors, modules, shared data, flags named ``_…``) does not:
    it changes during a run, and a resume must still recognise the run."""
    out = {}
    for k, v in vars(algorithm).items():
        v = dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else v
        if not k.startswith("_") and _plain(v):
            out[k] = v
    return out


def _plain(v: Any) -> bool:
    if isinstance(v, (int, float, str, bool, type(None))):
        return True
    if isinstance(v, (list, tuple)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain(x) for k, x in v.items())
    return False


def sample_weights(ctx: Context, results: list[ClientResult]) -> list[float]:
    """Aggregation weights: local sample counts (``aggregation: weighted``) or equal (``mean``)."""
    return [r.num_samples if ctx.cfg.aggregation == "weighted" else 1.0 for r in results]


__all__ = ["Algorithm", "ClientResult", "LocalContext", "State", "average_states", "hyperparameters", "sample_weights"]
