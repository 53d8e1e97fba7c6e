"""A tiny federated problem on which a method's real hooks run through ``fed.rounds.run_round``, for the wiring
tests: each compares the global state, the clients' state and the server's state after a few rounds with a plain
transcription of the authors' update written in the test.

The problem: float64, 5 clients of 6–9 samples (4 features, 3 classes, label-skewed), 3 of them sampled a round
(partial participation), batch 4 (so a client's last batch is partial), 2 local epochs, momentum 0.5, a two-layer
model readable by hand (``features``: Linear 4→5 + tanh; ``head``: Linear 5→3). The transcription may reuse the
run's random streams (``ctx.rng("shuffle", round, client)`` for batch order, ``ctx.sample_clients()``), which are
not what a method computes but what it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace

import torch
from torch import nn

from fed.config import FLConfig
from fed.context import Context
from fed.data.datasets import TensorDataset
from fed.models import MODELS
from fed.models.base import SequentialSplit
from fed.rounds import run_round

SIZES = (6, 9, 7, 8, 6)
NUM_CLASSES = 3
DIM = 4
CFG = FLConfig(
    num_clients=len(SIZES),
    fraction=0.6,
    rounds=3,
    local_epochs=2,
    batch_size=4,
    lr=0.1,
    momentum=0.5,
    weight_decay=0.0,
    aggregation="weighted",
    local_test_fraction=0.2,
    model="wiring_mlp",
    device="cpu",
    channels_last=False,
    vectorise=True,  # methods on the batched path (fed.batched) train their clients together here
)


def wiring_mlp(in_channels: int, num_classes: int, image_size: int, hidden: int = 5) -> SequentialSplit:
    dim = in_channels * image_size * image_size
    return SequentialSplit(
        nn.Sequential(nn.Flatten(), nn.Linear(dim, hidden), nn.Tanh()), nn.Linear(hidden, num_classes)
    )


@contextmanager
def float64():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def tiny_data(seed: int = 0, sizes=SIZES, num_classes: int = NUM_CLASSES, dim: int = DIM):
    """(train, test, partition): label-skewed clients (client k mostly holds class k mod C), inputs shaped
    (N, dim, 1, 1) so that image models and ``input_shape`` work; class means apart so training moves."""
    g = torch.Generator().manual_seed(seed)
    ys, train_idx, start = [], [], 0
    for k, n in enumerate(sizes):
        main = torch.full((n,), k % num_classes)
        other = torch.randint(num_classes, (n,), generator=g)
        ys.append(torch.where(torch.rand(n, generator=g) < 0.7, main, other))
        train_idx.append(list(range(start, start + n)))
        start += n
    y = torch.cat(ys)
    centres = torch.randn(num_classes, dim, generator=g, dtype=torch.float64)
    x = (centres[y] + 0.7 * torch.randn(len(y), dim, generator=g, dtype=torch.float64))[:, :, None, None]
    yt = torch.arange(12) % num_classes
    xt = (centres[yt] + 0.7 * torch.randn(12, dim, generator=g, dtype=torch.float64))[:, :, None, None]
    partition = {"clients": [{"train": idx, "test": []} for idx in train_idx]}
    return TensorDataset(x, y, num_classes), TensorDataset(xt, yt, num_classes), partition


def tiny_context(
    monkeypatch, cfg: FLConfig = CFG, model: Callable[..., nn.Module] = wiring_mlp, extra_modules=None, **changes
) -> Context:
    """A :class:`Context` over :func:`tiny_data` with ``cfg`` (``changes`` replace its fields); the model is
    registered as ``cfg.model`` for the test's duration. Call inside :func:`float64`."""
    monkeypatch.setitem(MODELS, "wiring_mlp", model)
    train, test, partition = tiny_data()
    return Context(replace(cfg, **changes), train, test, partition, seed=3, device=torch.device("cpu"),
                   extra_modules=extra_modules)  # fmt: skip


def run_rounds(ctx: Context, algorithm, rounds: int) -> list[list[int]]:
    """Set up and run ``rounds`` rounds; returns the clients each round sampled."""
    algorithm.setup(ctx)
    sampled = []
    for _ in range(rounds):
        ctx.round += 1  # selection reads the round it selects for
        sampled.append(list(algorithm.select_clients(ctx)))
        ctx.round -= 1
        run_round(ctx, algorithm)
    return sampled


def batches(ctx: Context, round_: int, client: int, epochs: int | None = None) -> list[torch.Tensor]:
    """The index batches ``local_sgd`` draws for (round, client): the same stream, so a transcription can follow
    the same batch order without calling the engine."""
    g = ctx.rng("shuffle", round_, client)
    n = len(ctx.train_idx[client])
    return [
        b
        for _ in range(epochs or ctx.cfg.local_epochs)
        for b in torch.randperm(n, generator=g).split(ctx.cfg.batch_size)
    ]


def load(net: nn.Module, state: list[torch.Tensor]) -> nn.Module:
    """``net`` with the tensors ``state`` (a list in ``parameters()`` order): a transcription's model at x."""
    with torch.no_grad():
        for p, v in zip(net.parameters(), state):
            p.copy_(v)
    return net


def weighted_mean(states: list[list[torch.Tensor]], sizes: list[int]) -> list[torch.Tensor]:
    """FedAvg's n_k-weighted mean of parameter lists."""
    return [sum(s[j] * n / sum(sizes) for s, n in zip(states, sizes)) for j in range(len(states[0]))]


def params(module: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def assert_close(actual, expected, what: str = "", rtol: float = 1e-9, atol: float = 1e-11) -> None:
    """Tensors, lists or dicts of tensors equal to float64 rounding."""
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys(), what
        for k in expected:
            assert_close(actual[k], expected[k], f"{what}[{k}]", rtol, atol)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), what
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_close(a, e, f"{what}[{i}]", rtol, atol)
    else:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")
