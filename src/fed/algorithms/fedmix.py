"""FedMix and NaiveMix (Yoon et al., ICLR 2021): mixup with averaged data shared once before training.

Every client shares the means of its data in random groups of M samples (x̄, ȳ: mean image, mean one-hot label).
During local training each sample (x, y) is paired with a random mean (x̄, ȳ) of another client:

    NaiveMix   ℓ( f((1−λ)x + λx̄), (1−λ)y + λȳ )
    FedMix     (1−λ) ℓ(f((1−λ)x), y) + λ ℓ(f((1−λ)x), ȳ) + λ ⟨∂ℓ(f((1−λ)x), y)/∂x, x̄⟩
               (the first-order Taylor approximation of the global mixup loss, Eq. 6)

The paper's Taylor term (``taylor_term: paper``, the default) is λ · mean_i ⟨∂ℓ_i/∂u, x̄_i⟩ at the model's input
u = (1−λ)x. No authors' code is public; the public implementations (LINs-lab/FedBR ``fedbr/algorithms.py``
``FedMix.update``, smduan/FedMix ``fedavg/client.py``) take the gradient of the (1−λ)-weighted batch-mean loss and
average the inner products over the batch once more: the paper's term × (1−λ)/B (``taylor_term: code``).

FedMix averages all of a client's data; ``share_fraction`` < 1 averages only a random fraction of it (FLea Fig. 6,
right: accuracy against the proportion of shared augmentations).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad

from fed.algorithms.base import Algorithm
from fed.losses import one_hot, soft_cross_entropy
from fed.sharing import mean_batches, share_subset


def input_gradient(model, x, y) -> tuple[torch.Tensor, torch.Tensor]:
    """∂CE(f(x), y)/∂x (mean-reduced: per-sample gradients / B), itself differentiable by the model's parameters,
    and the logits f(x) of the same forward pass, whose BatchNorm statistics move once as in ``model(x)``.
    ``torch.func.grad`` rather than ``torch.autograd.grad``, so that a round's clients can take it together
    (``fed.batched``); the buffers go in as inputs, because a transform may only update its inputs in place."""

    def ce(x_in, buffers):
        logits = functional_call(model, dict(model.named_parameters()) | buffers, (x_in,))
        return F.cross_entropy(logits, y), logits

    return grad(ce, has_aux=True)(x.detach(), dict(model.named_buffers()))


TAYLOR_TERMS = ("paper", "code")


def fedmix_loss(model, x, y, x_bar, y_bar, lam: float, taylor_term: str = "paper") -> torch.Tensor:
    grad_x, logits = input_gradient(model, (1 - lam) * x, y)
    taylor = (grad_x * x_bar).sum()  # = mean_i ⟨∂ℓ_i/∂x, x̄_i⟩
    if taylor_term == "code":  # ∂ of the (1−λ)-weighted mean loss, its inner products averaged once more
        taylor = taylor * (1 - lam) / len(y)
    return (1 - lam) * F.cross_entropy(logits, y) + lam * soft_cross_entropy(logits, y_bar) + lam * taylor


def naivemix_loss(model, x, y, x_bar, y_bar, lam: float | torch.Tensor, num_classes: int) -> torch.Tensor:
    """``lam``: one weight, or one per sample (shape (B,))."""
    lam = torch.as_tensor(lam, dtype=x.dtype, device=x.device)
    lam_x, lam_y = (lam.view(-1, *[1] * (x.dim() - 1)), lam.view(-1, 1)) if lam.dim() else (lam, lam)
    target = (1 - lam_y) * one_hot(y, num_classes, x.dtype) + lam_y * y_bar
    return soft_cross_entropy(model((1 - lam_x) * x + lam_x * x_bar), target)


class MeanSharing(Algorithm):
    """Shares every client's mean batches in ``setup``; ``local.extra['pool']`` holds the others' means."""

    def __init__(self, lam: float = 0.05, mean_batch: int = 10, share_fraction: float = 1.0):
        if not 0 < share_fraction <= 1:
            raise ValueError(f"{self.name}: share_fraction must be in (0, 1], got {share_fraction}")
        self.lam, self.mean_batch, self.share_fraction = lam, mean_batch, share_fraction

    def shared_data(self, ctx, k: int):
        """The samples client k averages: all of them, or a random ``share_fraction`` of them."""
        x, y = ctx.client_data(k)
        if self.share_fraction == 1:
            return x, y
        keep = share_subset(len(y), self.share_fraction, ctx.rng("share_subset", k)).to(y.device)
        return x[keep], y[keep]

    def setup(self, ctx):
        means = [
            mean_batches(*self.shared_data(ctx, k), ctx.num_classes, self.mean_batch, ctx.rng("share", k))
            for k in range(ctx.num_clients)
        ]
        self.owner = torch.cat([torch.full((len(m[1]),), k) for k, m in enumerate(means)])
        self.x_bar, self.y_bar = (torch.cat(parts) for parts in zip(*means))
        ctx.share("mean_batches", len(self.owner))

    def client_update(self, ctx, client):
        ctx.model.load_state_dict(ctx.global_state)
        pool = torch.nonzero(self.owner != client).flatten()
        streams = {"pool": pool, "rng": ctx.rng("mix", ctx.round, client)}
        return self.train_locally(ctx, client, *ctx.client_data(client), streams=streams)

    def draw(self, local, n):
        """Random means (x̄, ȳ) from the pool, one per sample."""
        pool = local.streams["pool"]
        pick = pool[torch.randint(len(pool), (n,), generator=local.streams["rng"])]
        return self.x_bar[pick.to(self.x_bar.device)], self.y_bar[pick.to(self.y_bar.device)]


class FedMix(MeanSharing):
    """``taylor_term``: ``paper`` (Eq. 6) or ``code`` (the public implementations' scale, × (1−λ)/B)."""

    name = "fedmix"
    vectorise = True

    def __init__(
        self, lam: float = 0.05, mean_batch: int = 10, share_fraction: float = 1.0, taylor_term: str = "paper"
    ):
        super().__init__(lam, mean_batch, share_fraction)
        if taylor_term not in TAYLOR_TERMS:
            raise ValueError(f"fedmix: taylor_term must be one of {TAYLOR_TERMS}, got {taylor_term!r}")
        self.taylor_term = taylor_term

    def step_draws(self, model, x, y, local, ctx):
        x_bar, y_bar = self.draw(local, len(y))
        return {"x_bar": x_bar, "y_bar": y_bar}

    def local_loss(self, model, x, y, local, ctx):
        return fedmix_loss(model, x, y, local.draws["x_bar"], local.draws["y_bar"], self.lam, self.taylor_term)


class NaiveMix(MeanSharing):
    """``lam_beta`` = a: a weight λ_i ~ Beta(a, a) per sample instead of the fixed ``lam`` (FLea's code runs its
    "FedMix" baseline as NaiveMix with λ ~ Beta(2, 2))."""

    name = "naivemix"

    def __init__(
        self, lam: float = 0.05, mean_batch: int = 10, share_fraction: float = 1.0, lam_beta: float | None = None
    ):
        super().__init__(lam, mean_batch, share_fraction)
        if lam_beta is not None and lam_beta <= 0:
            raise ValueError(f"naivemix: lam_beta must be > 0, got {lam_beta}")
        self.lam_beta = lam_beta

    vectorise = True

    def step_draws(self, model, x, y, local, ctx):
        x_bar, y_bar = self.draw(local, len(y))
        lam = torch.full((len(y),), self.lam, dtype=x.dtype)
        if self.lam_beta is not None:  # from the client's mix stream, so the draws are seeded and resume exactly
            seed = int(torch.randint(2**62, (1,), generator=local.streams["rng"]))
            lam = torch.as_tensor(np.random.default_rng(seed).beta(self.lam_beta, self.lam_beta, size=len(y)))
        return {"x_bar": x_bar, "y_bar": y_bar, "lam": lam.to(x.device, x.dtype)}

    def local_loss(self, model, x, y, local, ctx):
        d = local.draws
        return naivemix_loss(model, x, y, d["x_bar"], d["y_bar"], d["lam"], ctx.num_classes)
