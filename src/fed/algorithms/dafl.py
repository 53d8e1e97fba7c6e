"""DA-FL (Tang, Wang & Liu, J. on Communications 2023): data augmentation for FL with shared DP synthetic samples.

Algorithm 1, per client C_i, before FL:
  m_i ← γ|D_i|; labels ŷ_1..ŷ_m from D_i's label multiset U_i (line 3), or privately by PLS (Algorithm 3);
  x̂_1..x̂_m ← PSG(m_i, ŷ, D_i) — the client's DP conditional GAN (Algorithm 2: the ``dp_cgan`` stage, fed.dpgan);
  upload D̂_i = {(x̂_k, ŷ_k)} to the server, which sends each client every other client's D̂_j (lines 7-10);
  D_i ← D_i ∪ {D̂_j}_{j≠i} (line 13). Then plain FedAvg on the augmented data (Sec. 4: "采用基础的 FedAvg 算法"):
  E epochs of SGD on D_i ∪ {D̂_j}_{j≠i}, aggregated with weights |D_i ∪ {D̂_j}_{j≠i}| (``aggregation: weighted``).

Only generator samples and their labels leave a client: the GAN stage's file holds generators, never data, and
``client_update`` reads the client's own samples plus the pool of synthetic ones.

PLS (Algorithm 3): for each class k, n̂_k ∈ {0, …, n̂} (n̂ = ⌊γn⌋) is drawn by the exponential mechanism with utility
u_k(D, r) = −|r/n̂ − n_k/n| and sensitivity Δu = 1/n:  Pr[n̂_k = r] ∝ exp(ε u_k(D, r) / (2Δu)).
We give each of the L classes ε1/L, so the labels cost ε1 in total by basic composition (docs/deviations.md:
Theorem 2 and its proof disagree on this). Theorem 3 states (ε0 + ε1, δ0); the ledger records it, but ε0 bounds
add/remove-one neighbours and ε1 replace-one ones, so read each under its own (docs/deviations.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import torch

from fed.algorithms.base import Algorithm
from fed.dpgan import PSGSettings, from_gan_space, generate
from fed.stages import Stage


def pls_probabilities(n_k: int, n: int, n_hat: int, epsilon: float) -> np.ndarray:
    """Eq. 5: the distribution of n̂_k over r = 0..n̂ for one class with n_k of the client's n samples."""
    r = np.arange(n_hat + 1)
    utility = -np.abs(r / max(n_hat, 1) - n_k / n)
    if math.isinf(epsilon):  # no noise: the utility's maximiser (the smallest one on a tie)
        p = np.zeros(n_hat + 1)
        p[np.argmax(utility)] = 1.0
        return p
    logits = epsilon * utility / (2 * (1 / n))
    p = np.exp(logits - logits.max())
    return p / p.sum()


def pls_counts(counts: np.ndarray, gamma: float, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Algorithm 3: private label counts n̂_1..n̂_L for class counts ``counts``; ε (the labels' total budget ε1)
    is split evenly over the L classes."""
    n = int(counts.sum())
    n_hat = math.floor(gamma * n)
    per_class = epsilon / len(counts)
    return np.array([rng.choice(n_hat + 1, p=pls_probabilities(int(c), n, n_hat, per_class)) for c in counts])


def sampled_counts(labels: np.ndarray, gamma: float, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Algorithm 1 line 3 (no privacy): m = γ|D| labels drawn from the multiset U_i without replacement."""
    m = math.floor(gamma * len(labels))
    return np.bincount(rng.choice(labels, size=m, replace=False), minlength=num_classes)


class DAFL(Algorithm):
    name = "dafl"
    vectorise = True

    def __init__(
        self,
        gamma: float = 0.01,
        pls_epsilon: float = 1.0,
        label_selection: str = "pls",
        gan: dict | None = None,
    ):
        if not 0 < gamma <= 1:
            raise ValueError(f"DA-FL: gamma (the sharing ratio γ) must be in (0, 1], got {gamma}")
        if label_selection not in ("pls", "sample"):
            raise ValueError(f"DA-FL: label_selection must be 'pls' or 'sample', got {label_selection!r}")
        if label_selection == "pls" and not float(pls_epsilon) > 0:
            raise ValueError(f"DA-FL: pls_epsilon (ε1) must be > 0, got {pls_epsilon}")
        self.gamma = gamma
        self.pls_epsilon = float(pls_epsilon)
        self.label_selection = label_selection
        self.gan = asdict(PSGSettings.from_params(gan))

    def stages(self):
        return {"gans": Stage.of("dp_cgan", **self.gan)}

    def setup(self, ctx):
        record = torch.load(ctx.stages["gans"], weights_only=False, map_location="cpu")
        settings = PSGSettings.from_params(record["settings"])
        self._synthetic = []
        for k in range(ctx.num_clients):  # at client k: its labels, its generator
            _, y = ctx.client_data(k)
            labels = y.cpu().numpy()
            rng = ctx.np_rng("labels", k)
            if self.label_selection == "pls":
                counts = pls_counts(np.bincount(labels, minlength=ctx.num_classes), self.gamma, self.pls_epsilon, rng)
            else:
                counts = sampled_counts(labels, self.gamma, ctx.num_classes, rng)
            y_hat = torch.repeat_interleave(torch.arange(ctx.num_classes), torch.as_tensor(counts))
            g = generate(
                record["clients"][k]["generator"],
                y_hat,
                ctx.num_classes,
                record["channels"],
                settings,
                ctx.seed_int("generate", k),
            )
            x_hat = from_gan_space(g, record["mean"], record["std"], ctx.input_shape[-1])
            self._synthetic.append((x_hat.to(ctx.device, memory_format=ctx.memory_format), y_hat.to(ctx.device)))
        ctx.share("synthetic_samples", sum(len(y) for _, y in self._synthetic))
        epsilon_gan = max(c["epsilon"] for c in record["clients"])
        epsilon_labels = self.pls_epsilon if self.label_selection == "pls" else math.inf
        ctx.guarantee("epsilon_gan", epsilon_gan)  # ε0 spent: the largest over clients (each holds its own)
        ctx.guarantee("epsilon_labels", epsilon_labels)  # ε1
        ctx.guarantee("epsilon_total", epsilon_gan + epsilon_labels)  # Theorem 3: ε0 + ε1
        ctx.guarantee("delta", settings.delta)

    def training_data(self, ctx, client) -> tuple[torch.Tensor, torch.Tensor]:
        """D_i ∪ {D̂_j}_{j≠i}: the client's own samples and every other client's synthetic ones."""
        x, y = ctx.client_data(client)
        others = [s for j, s in enumerate(self._synthetic) if j != client]
        return torch.cat([x, *(s[0] for s in others)]), torch.cat([y, *(s[1] for s in others)])

    def client_update(self, ctx, client):
        ctx.model.load_state_dict(ctx.global_state)
        return self.train_locally(ctx, client, *self.training_data(ctx, client))
