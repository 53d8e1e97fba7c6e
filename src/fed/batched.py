"""A round's clients trained as one batched computation (the preset's ``vectorise: true``).

The sampled clients' local SGD runs as one ``torch.func`` computation over their stacked parameters and buffers
(``vmap`` of ``grad`` of the method's own ``local_loss``), the optimiser written out (torch's SGD with momentum and
weight decay, and its Adam), so one kernel launch serves every client. What stays per client is the method's Python
around the training — ``client_update`` before and after ``ctx.train`` — and it runs unchanged:

1. each sampled client's ``client_update`` runs in order, on a thread of its own, until it asks ``ctx.train`` to train
   with its method's objective (``train_locally``); the request is recorded and the client waits;
2. the requests are trained together: step t of every client that has a step t, grouped by batch size (a client's
   last batch of an epoch may be partial; a client with fewer steps leaves the computation), each client's batches
   drawn from its own seeded stream exactly as ``fed.training.local_sgd`` draws them, and the step's random draws
   (``Algorithm.step_draws``) taken from the client's own streams and stacked;
3. each client then continues where it waited, with its trained state in the model and torch's global random state
   as it left it, as if it had trained alone.

Only one thread runs at a time, in the loop's order, so the batched and the looped round compute the same numbers up
to the rounding of another operation order: equal to float64 rounding, proved per method by the tests
(``tests/test_batched.py``). A method opts in with ``vectorise = True`` once that test holds for it: its local
objective must be a function of (model, batch, its own per-client tensors, the step's draws) that draws nothing
itself, and its clients' Python before training must not depend on another client's after training.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils import _pytree as pytree

from fed.models.base import stochastic
from fed.training import LocalStats, SGDSettings, local_sgd

if TYPE_CHECKING:
    from fed.algorithms.base import Algorithm, ClientResult, LocalContext
    from fed.context import Context


@dataclass
class Request:
    """One client's deferred ``ctx.train``: its model (the object, and its state when it asked), data, batch
    stream, settings and objective; ``final`` and ``stats`` once trained."""

    model: nn.Module
    start: dict[str, torch.Tensor]
    x: torch.Tensor
    y: torch.Tensor
    generator: torch.Generator
    settings: SGDSettings
    algorithm: Algorithm
    local: LocalContext
    after_step: bool
    rng: list[torch.Tensor] | None = None  # torch's global random states, the client's own (``_rng_state``)
    final: dict[str, torch.Tensor] | None = None
    stats: LocalStats | None = None


class _Aborted(BaseException):
    """Raised in a waiting client when another client failed: the round is abandoned."""


_current = threading.local()  # the _Client a thread runs, if any


class _Client(threading.Thread):
    def __init__(self, owner: BatchedRound, work):
        super().__init__(daemon=True)
        self.owner, self.work, self.result, self.error = owner, work, None, None
        self.request: Request | None = None
        self.go, self.waiting = threading.Event(), threading.Event()
        self.abort = False

    def run(self):
        _current.client = self
        try:
            self.result = self.work()
        except BaseException as err:  # handed to the scheduler, which re-raises it
            self.error = err
        finally:
            self.request = None
            self.waiting.set()

    def advance(self) -> None:
        """Run this client until it waits for training or ends (the caller waits meanwhile)."""
        self.waiting.clear()
        if self.is_alive():
            self.go.set()
        else:
            self.start()
        self.waiting.wait()


class BatchedRound:
    """The scheduler of one round: ``ctx.train`` defers to it (``defer``) from the clients' threads."""

    def __init__(self, ctx: Context):
        self.ctx = ctx

    def run(self, algorithm: Algorithm, clients: list[int]) -> list[ClientResult]:
        ctx, threads = self.ctx, []
        try:
            for k in clients:
                torch.manual_seed(ctx.seed_int("client", ctx.round, k))  # as the loop seeds each client
                thread = _Client(self, lambda k=k: algorithm.client_update(ctx, k))
                threads.append(thread)
                self._advance(thread)
            while waiting := [t for t in threads if t.request is not None]:
                train_together([t.request for t in waiting], ctx)
                for thread in waiting:
                    self._advance(thread)
        finally:
            for thread in threads:  # a failure left others waiting: release them
                if thread.is_alive():
                    thread.abort = True
                    thread.go.set()
        return [t.result for t in threads]

    @staticmethod
    def _advance(thread: _Client) -> None:
        thread.advance()
        if thread.error is not None:
            raise thread.error

    def defer(self, model, x, y, generator, settings: SGDSettings, objective, after_step: bool) -> LocalStats | None:
        """From a client's thread (``Context.train`` with ``objective`` = (method, LocalContext)): wait until its
        local training is trained with the round's other clients, then continue with its trained state. None when
        called from outside a client (the caller trains alone)."""
        thread = getattr(_current, "client", None)
        if thread is None or thread.owner is not self:
            return None
        start = {k: v.detach().clone() for k, v in model.state_dict().items()}
        request = Request(model, start, x, y, generator, settings, *objective, after_step, _rng_state())
        thread.request = request
        thread.waiting.set()
        thread.go.wait()
        thread.go.clear()
        if thread.abort:
            raise _Aborted
        _set_rng_state(request.rng)  # the client's own global random state, as the loop would have left it
        request.model.load_state_dict(request.final)
        request.model.train()
        return request.stats


def train_together(requests: list[Request], ctx: Context) -> None:
    """Train the requests; those that share a model, method and settings in one batched computation."""
    groups: dict[tuple, list[Request]] = {}
    for r in requests:
        groups.setdefault((id(r.model), id(r.algorithm), r.settings, r.after_step), []).append(r)
    for group in groups.values():
        if stochastic(group[0].model) or (leaves := _batched_locals(group)) is None:  # one by one: random draws
            # inside the forward pass, or per-client objects that cannot be stacked
            for r in group:
                _train_alone(r, ctx)
        else:
            _train_batched(group, leaves, ctx)


def _train_alone(r: Request, ctx: Context) -> None:
    r.model.load_state_dict(r.start)
    alg, model, local = r.algorithm, r.model, r.local
    step = (lambda: alg.after_step(model, local, ctx)) if r.after_step else None
    _set_rng_state(r.rng)  # dropout draws from it (on a GPU, from the device's)
    r.stats = local_sgd(model, r.x, r.y, alg.objective(model, local, ctx), r.generator, r.settings, step)
    r.rng = _rng_state()
    r.final = {k: v.detach().clone() for k, v in model.state_dict().items()}


def _batched_locals(group: list[Request]) -> tuple[Any, list, list] | None:
    """The clients' LocalContexts as one pytree: (spec, leaves, in_dims) — a tensor leaf that differs between the
    clients stacked (in_dim 0), one they share passed once (None); None when they cannot be batched (different
    structures, or plain values that differ). Stacked leaves are row-major for the reason ``_stack`` gives: a
    channels-last state per client (MOON's previous model) failed MOON's second round on an H200, 2026-11-30."""
    flat = [pytree.tree_flatten((r.local.global_params, r.local.extra)) for r in group]
    spec = flat[0][1]
    if any(s != spec for _, s in flat):
        return None
    leaves, dims = [], []
    for values in zip(*(f for f, _ in flat)):
        first = values[0]
        if all(v is first for v in values):
            leaves.append(first)
            dims.append(None)
        elif all(isinstance(v, torch.Tensor) and v.shape == first.shape and v.dtype == first.dtype for v in values):
            leaves.append(torch.stack(values).contiguous())  # row-major, as _stack's (MOON's previous models)
            dims.append(0)
        elif not any(isinstance(v, torch.Tensor) for v in values) and all(v == first for v in values):
            leaves.append(first)
            dims.append(None)
        else:
            return None
    return spec, leaves, dims


class _Objective(nn.Module):
    """The method's local objective (or, with ``after_step=True``, its after-step correction) as a module over the
    client model's tensors, for ``torch.func.functional_call``."""

    def __init__(self, model: nn.Module, algorithm: Algorithm, ctx: Context):
        super().__init__()
        self.model, self.algorithm, self.ctx = model, algorithm, ctx

    def forward(self, local, x=None, y=None, after_step=False):
        if after_step:  # in place on the parameters, as the method's hook writes it
            self.algorithm.after_step(self.model, local, self.ctx)
            return None
        return self.algorithm.local_loss(self.model, x, y, local, self.ctx)


def _prefixed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {f"model.{n}": v for n, v in state.items()}


def _train_batched(group: list[Request], locals_: tuple[Any, list, list], ctx: Context) -> None:
    first, s = group[0], group[0].settings
    spec, leaves, dims = locals_
    objective = _Objective(first.model, first.algorithm, ctx)
    pnames = [n for n, _ in first.model.named_parameters()]
    bnames = [n for n, _ in first.model.named_buffers()]
    P, B = _stack(group, pnames), _stack(group, bnames)
    plans = [_batches(r) for r in group]
    optimiser = _Optimiser(s)
    total = [torch.zeros((), device=r.y.device) for r in group]
    seen, steps = [0] * len(group), [0] * len(group)

    def local_of(flat, draws):
        global_params, extra = pytree.tree_unflatten(flat, spec)
        # a batched objective has no single client id, and no streams (they are step_draws')
        return replace(first.local, client=None, global_params=global_params, extra=extra, draws=draws, streams={})

    def loss(p, b, x, y, flat, draws):
        out = functional_call(objective, _prefixed(p) | _prefixed(b), (local_of(flat, draws), x, y), tie_weights=False)
        return out, (out.detach(), b)  # b: the buffers the forward pass updated in place (BN statistics)

    def after(p, flat):
        p = {n: v.clone() for n, v in p.items()}
        with torch.no_grad():
            functional_call(objective, _prefixed(p), (local_of(flat, {}),), {"after_step": True}, strict=False)
        return p

    step_fn = vmap(grad(loss, has_aux=True), in_dims=(0, 0, 0, 0, dims, 0))
    after_fn = vmap(after, in_dims=(0, dims))
    # whether the method draws per step (overrides Algorithm.step_draws): else no random state is swapped per step
    draws = type(first.algorithm).step_draws.__qualname__ != "Algorithm.step_draws"
    ctx.global_model()  # a teacher some objectives call: built here, as its initialisation draws random numbers
    first.model.train()
    for t in itertools.count():
        active = [i for i, plan in enumerate(plans) if t < len(plan)]
        if not active:
            break
        batch = {i: (group[i].x[plans[i][t]], group[i].y[plans[i][t]]) for i in active}
        drawn = {i: _draw(group[i], *batch[i], ctx) if draws else {} for i in active}  # each from its own streams
        by_shape: dict[tuple, list[int]] = {}  # one computation per batch size (and shape of the draws)
        for i in active:
            key = (len(batch[i][1]), *((k, v.shape, v.dtype) for k, v in drawn[i].items()))
            by_shape.setdefault(key, []).append(i)
        for members in by_shape.values():
            size = len(batch[members[0]][1])
            sel = None if len(members) == len(group) else torch.tensor(members, device=first.y.device)
            pick = (lambda T: T) if sel is None else (lambda T, sel=sel: T[sel])
            x = torch.stack([batch[i][0] for i in members]).contiguous()
            y = torch.stack([batch[i][1] for i in members])
            d = {k: torch.stack([drawn[i][k] for i in members]) for k in drawn[members[0]]}
            flat = [pick(leaf) if dim == 0 else leaf for leaf, dim in zip(leaves, dims)]
            p = {n: pick(P[n]) for n in pnames}
            if t == 0:  # once: torch.optim skips what the objective does not reach; torch.func gives it a zero
                i = members[0]
                optimiser.frozen = _unreached(objective, {n: P[n][i] for n in pnames}, {n: B[n][i] for n in bnames},
                                              *batch[i], replace(group[i].local, draws=drawn[i]))  # fmt: skip
            g, (losses, b) = step_fn(p, {n: pick(B[n]).clone() for n in bnames}, x, y, flat, d)
            p = optimiser.step(t, p, g, pick, sel, len(group))
            if first.after_step:
                p = after_fn(p, flat)
            for store, new in ((P, p), (B, b)):
                for n, v in new.items():
                    if sel is None:
                        store[n] = v
                    else:
                        store[n][sel] = v
            for j, i in enumerate(members):
                total[i] += losses[j] * size
                seen[i] += size
                steps[i] += 1
    for i, r in enumerate(group):
        r.final = {n: P[n][i].clone() for n in pnames} | {n: B[n][i].clone() for n in bnames}
        r.stats = LocalStats(float(total[i]) / max(seen[i], 1), steps[i])


def _stack(group: list[Request], names: list[str]) -> dict[str, torch.Tensor]:
    """The clients' starting tensors, stacked row-major (as the batches are): a channels-last weight stacked stays
    channels-last in each client's slice, so CUDA's convolutions return channels-last maps and BatchNorm's CUDA kernel
    clones them channels-last, which vmap does not support (a Fed-ZDA round failed so on an H200). The loop keeps the
    presets' channels-last."""
    return {n: torch.stack([r.start[n] for r in group]).contiguous() for n in names}


def _unreached(objective: _Objective, p, b, x, y, local) -> set[str]:
    """The parameters one client's objective does not reach on its first batch (autograd gives them no gradient:
    FedDPMS' VAE heads in Stage II). torch.optim leaves them as they are — no weight decay, no momentum — and so
    does the batched optimiser; the set is taken as fixed over a local update."""
    p = {n: v.detach().clone().requires_grad_() for n, v in p.items()}  # a copy: an objective may step some
    state = _prefixed(p) | _prefixed({n: v.clone() for n, v in b.items()})
    out = functional_call(objective, state, (local, x, y), tie_weights=False)
    grads = torch.autograd.grad(out, list(p.values()), allow_unused=True)
    return {n for n, g in zip(p, grads) if g is None}


def _draw(r: Request, x: torch.Tensor, y: torch.Tensor, ctx: Context) -> dict[str, torch.Tensor]:
    """The client's draws for its next step, with torch's global random state its own (as in the loop)."""
    _set_rng_state(r.rng)
    drawn = r.algorithm.step_draws(r.model, x, y, r.local, ctx)
    r.rng = _rng_state()
    return drawn


def _rng_state() -> list[torch.Tensor]:
    """torch's global random state: the CPU's, and each GPU's once CUDA is in use (``torch.manual_seed`` seeds all)."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return [torch.get_rng_state(), *cuda]


def _set_rng_state(state: list[torch.Tensor]) -> None:
    torch.set_rng_state(state[0])
    if len(state) > 1:
        torch.cuda.set_rng_state_all(state[1:])


def _batches(r: Request) -> list[torch.Tensor]:
    """A client's index batches for all its epochs, drawn from its own stream as ``local_sgd`` draws them."""
    s, n = r.settings, len(r.y)
    return [
        i for _ in range(s.epochs) for i in torch.randperm(n, generator=r.generator).to(r.y.device).split(s.batch_size)
    ]


class _Optimiser:
    """torch.optim.SGD (momentum, weight decay; no dampening, no Nesterov) and torch.optim.Adam (fresh for each local
    update, as ``local_sgd`` builds it), written out over the clients' stacked parameters. Every client that takes
    step t has taken t steps before it, so the step number (momentum's first step, Adam's bias correction) is one
    for all of them; the state of the clients that do not step is left as it is."""

    def __init__(self, s: SGDSettings):
        self.s = s
        self.state: dict[tuple[str, str], torch.Tensor] = {}
        self.frozen: set[str] = set()  # parameters without a gradient: not stepped

    def _get(self, key, pick):
        return pick(self.state[key])

    def _put(self, key, value, sel, clients):
        if sel is None:
            self.state[key] = value
        else:
            if key not in self.state:
                self.state[key] = value.new_zeros((clients, *value.shape[1:]))
            self.state[key][sel] = value

    def step(self, t, p, g, pick, sel, clients):
        s, out = self.s, {}
        for n, w in p.items():
            if n in self.frozen:
                out[n] = w
                continue
            d = g[n] if not s.weight_decay else g[n].add(w, alpha=s.weight_decay)
            if s.optimizer == "adam":
                b1, b2, eps = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults, as local_sgd builds it
                m = d.new_zeros(d.shape) if t == 0 else self._get((n, "m"), pick)
                v = d.new_zeros(d.shape) if t == 0 else self._get((n, "v"), pick)
                m = m.lerp(d, 1 - b1)
                v = v.mul(b2).addcmul(d, d, value=1 - b2)
                self._put((n, "m"), m, sel, clients)
                self._put((n, "v"), v, sel, clients)
                step_size = s.lr / (1 - b1 ** (t + 1))
                denom = (v.sqrt() / (1 - b2 ** (t + 1)) ** 0.5).add(eps)
                out[n] = w.addcdiv(m, denom, value=-step_size)
            elif s.momentum:
                buf = d.clone() if t == 0 else self._get((n, "buf"), pick).mul(s.momentum).add(d)
                self._put((n, "buf"), buf, sel, clients)
                out[n] = w.add(buf, alpha=-s.lr)
            else:
                out[n] = w.add(d, alpha=-s.lr)
        return out
