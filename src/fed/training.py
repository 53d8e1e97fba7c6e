"""Local training primitives shared by every method: mini-batch SGD over a loss, prediction, loss of a state.

Pure functions of (model, data, settings, generator): no engine, no global state beyond torch's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class SGDSettings:
    lr: float
    momentum: float = 0.0
    optimizer: str = "sgd"  # "sgd" | "adam" (a fresh Adam per local update; momentum unused)
    weight_decay: float = 0.0
    batch_size: int = 10
    epochs: int = 1
    memory_format: torch.memory_format = torch.contiguous_format


@dataclass(frozen=True)
class LocalStats:
    """What a pass of local training reports: mean loss over all samples seen, and the number of SGD steps
    (FedNova normalises by it, SCAFFOLD divides by it)."""

    loss: float
    steps: int


def local_sgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    generator: torch.Generator,
    s: SGDSettings,
    after_step: Callable[[], None] | None = None,
) -> LocalStats:
    """``s.epochs`` epochs of mini-batch SGD (or Adam) on (x, y), batches drawn by ``generator``; ``after_step`` runs
    after every optimiser step (a change to the weights outside the optimiser, e.g. SCAFFOLD's correction); the
    model is left in train mode."""
    opt = (
        torch.optim.Adam(model.parameters(), lr=s.lr, weight_decay=s.weight_decay)
        if s.optimizer == "adam"
        else torch.optim.SGD(model.parameters(), lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)
    )
    model.train()
    total = torch.zeros((), device=y.device)
    seen = steps = 0
    for _ in range(s.epochs):
        for idx in torch.randperm(len(y), generator=generator).to(y.device).split(s.batch_size):
            loss = loss_fn(x[idx].contiguous(memory_format=s.memory_format), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if after_step is not None:
                after_step()
            total += loss.detach() * len(idx)
            seen += len(idx)
            steps += 1
    return LocalStats(float(total) / max(seen, 1), steps)


# prediction's batch: FedDPMS' CNN (32 channels at 28 × 28) predicts twice as fast on a CPU in batches of 128 as of
# 1,000, whose activations leave the cache; the logits are the same (benchmarks/predict_batch.py)
PREDICT_BATCH = 128


@torch.inference_mode()
def predict(
    model: nn.Module,
    x: torch.Tensor,
    batch: int = PREDICT_BATCH,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> torch.Tensor:
    model.eval()
    return torch.cat([model(xb.contiguous(memory_format=memory_format)).argmax(1) for xb in x.split(batch)])


@torch.inference_mode()
def mean_loss(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batch: int = 1000,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> float:
    """Mean cross-entropy of ``model`` on (x, y), BN in eval mode (e.g. q-FFL's F_k at the global model)."""
    model.eval()
    total = sum(
        F.cross_entropy(model(xb.contiguous(memory_format=memory_format)), yb, reduction="sum").item()
        for xb, yb in zip(x.split(batch), y.split(batch))
    )
    return total / max(len(y), 1)


def state_copy(model: nn.Module) -> State:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def average_states(states: list[State], weights: list[float]) -> State:
    """Weighted mean of state dicts: parameters and BN running statistics; integer buffers (BN's
    ``num_batches_tracked``) are averaged and rounded."""
    total = float(sum(weights))
    out: State = {}
    for key, ref in states[0].items():
        acc = sum(s[key].double() * (w / total) for s, w in zip(states, weights))
        out[key] = acc.round().to(ref.dtype) if not ref.is_floating_point() else acc.to(ref.dtype)
    return out
