"""Differentially private mean sharing (FedDPMS, Chen & Vikalo 2023, Stage II): pure functions of tensors, the
privacy accounting, and the server's client matching. ``fed.algorithms.feddpms`` puts them in the round loop.

Mechanism (``noise: calibrated``, the slides' Definition 2 with a sensitivity that holds). Client i's data
representation of class c is the mean of its latent means, z_i^c = (1/N) Σ_j clip_C(Mu(E(x_j))), every row clipped to
ℓ2 norm ≤ C. Adding, removing or replacing one sample moves the mean by at most Δ = 2C/N (replace: ‖a − b‖/N ≤ 2C/N;
add: ‖x − z‖/(N+1) ≤ 2C/(N+1)). Each release is z̃ = z + N(0, (σΔ)² I): a Gaussian mechanism with noise multiplier σ
(noise std / sensitivity). The slides: "M(d) = f(d) + N(0, S_f²·σ²) … sensitive S_f is 1/N_i^c" (valid only for
representations in [0, 1], never ensured).

The official code (``noise: code``, CityChan/Federated-DPMS ``utils.py`` ``GenData``): z_j ~ q(z|x_j) (one
reparameterised draw per sample), 10 % of them resampled with replacement (all, with replacement, when N ≤ 20), their
mean — ``torch.mean(z)``, one scalar over every dimension (``mean: scalar``), or per dimension (``mean: vector``) —
plus N(0, σ² I): σ an absolute std, nothing clipped, no sensitivity, no ε.

Accounting, per (client, class) — classes are disjoint subsets of a client's data, so a client's guarantee is the
largest over its classes (parallel composition):
- ``epsilon_classical``: the slides' Definition 2, σ > √(2 ln(5/(4δ)))/ε, per release (valid for ε < 1 only);
- ``epsilon_exact``: the tight ε of the Gaussian mechanism (the analytic Gaussian mechanism, Balle & Wang 2018:
  dp_accounting's ``GaussianPrivacyLoss.get_delta_for_epsilon``, inverted in ε), for k releases of the same mean —
  k Gaussian releases compose exactly to one with noise multiplier σ/√k.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch


def clip_rows(z: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """Scale every row of ``z`` to ℓ2 norm ≤ ``clip_norm`` (rows already inside are unchanged)."""
    norms = z.norm(dim=1, keepdim=True)
    return z * torch.clamp(clip_norm / norms.clamp_min(1e-12), max=1.0)


def sensitivity(clip_norm: float, n: int) -> float:
    """ℓ2 sensitivity of the mean of ``n`` rows of norm ≤ ``clip_norm`` under add/remove/replace-one: 2C/n."""
    return 2 * clip_norm / n


def class_mean(z: torch.Tensor, clip_norm: float, collapse: bool = False) -> torch.Tensor:
    """The clipped rows' mean; ``collapse`` reduces it to one scalar broadcast over the latent dimensions (the
    official code's ``torch.mean(z)``; its sensitivity is no larger)."""
    m = clip_rows(z, clip_norm).mean(0)
    return m.mean().expand_as(m).clone() if collapse else m


def code_class_mean(
    mu: torch.Tensor, logvar: torch.Tensor, generator: torch.Generator, collapse: bool = False
) -> torch.Tensor:
    """The official code's class representation (``GenData``): one draw z_j = μ_j + exp(logvar_j / 2)·ε_j per
    sample, ⌊0.1 N⌋ of them resampled with replacement (N when N ≤ 20), their mean; ``collapse``: ``torch.mean(z)``,
    one scalar broadcast over the latent dimensions. Nothing is clipped."""
    n = len(mu)
    z = mu + torch.exp(logvar / 2) * torch.randn(mu.shape, generator=generator).to(mu)
    picked = torch.randint(n, (int(0.1 * n) if n > 20 else n,), generator=generator).to(mu.device)
    m = z[picked].mean(0)
    return m.mean().expand_as(m).clone() if collapse else m


def epsilon_classical(noise_multiplier: float, delta: float) -> float:
    """The slides' bound solved for ε: σ = √(2 ln(5/(4δ)))/ε ⇒ ε = √(2 ln(1.25/δ))/σ (one release)."""
    return math.sqrt(2 * math.log(1.25 / delta)) / noise_multiplier


def epsilon_exact(noise_multiplier: float, delta: float, releases: int = 1) -> float:
    """Tight ε of ``releases`` Gaussian releases with noise multiplier σ at δ; inf where ε > 2^19 = 524,288 (the
    bracket doubles from 1 and stops before passing 1e6)."""
    if releases == 0:
        return 0.0
    from dp_accounting.pld.privacy_loss_mechanism import GaussianPrivacyLoss
    from scipy.optimize import brentq

    loss = GaussianPrivacyLoss(standard_deviation=noise_multiplier / math.sqrt(releases), sensitivity=1.0)
    excess = lambda eps: loss.get_delta_for_epsilon(eps) - delta  # noqa: E731 (decreasing in ε)
    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0:
        hi *= 2
        if hi > 1e6:
            return math.inf
    return float(brentq(excess, 0.0, hi, xtol=1e-10))


@dataclass
class Pool:
    """What a donor uploads for one class: the accepted noisy means and how many releases it took."""

    latents: torch.Tensor  # (accepted, code) noisy means z̃ whose decoding the classifier labelled c
    attempts: int  # noisy means drawn: each is a release of z_i^c (see accounting)


def noisy_mean_pool(
    mean: torch.Tensor,
    std: float,
    label: int,
    accept: Callable[[torch.Tensor], torch.Tensor],
    quota: int,
    max_attempts: int,
    generator: torch.Generator,
) -> Pool:
    """DPMS for one abundant class: draw z̃ = mean + N(0, std² I) in batches of ``quota`` (the code's ``gen_num`` per
    iteration), keep those ``accept`` (decode with the global decoder, classify) labels ``label``, until ``quota`` are
    kept (the first ``quota``) or ``max_attempts`` are drawn."""
    kept, attempts = [], 0
    while sum(len(k) for k in kept) < quota and attempts < max_attempts:
        b = min(quota, max_attempts - attempts)
        noisy = mean + std * torch.randn(b, len(mean), generator=generator).to(mean)
        attempts += b
        kept.append(noisy[accept(noisy) == label])
    latents = torch.cat(kept)[:quota] if kept else mean.new_zeros(0, len(mean))
    return Pool(latents, attempts)


def abundant_and_scarce(counts: np.ndarray, k: int) -> tuple[list[int], list[int]]:
    """A client's k most and k least numerous classes, as the code's ``counts.argsort()[::-1][:k]`` and
    ``[C − k:]`` (ties: an ascending stable sort, reversed — the higher class id is the more abundant). An abundant
    class needs at least one sample (the code's empty "abundant" class yields nothing either)."""
    order = np.argsort(counts, kind="stable")
    abundant = [int(c) for c in order[::-1][:k] if counts[c] > 0]
    scarce = [int(c) for c in order[:k]]
    return abundant, scarce


def match_clients(abundant: list[list[int]], scarce: list[list[int]], code_rule: bool = False) -> list[int | None]:
    """The server's matching: receiver i gets the donor j ≠ i with the most of i's scarce classes among its abundant
    ones (the lowest j on a tie); None when no donor has any. ``code_rule``: the code's ``np.argmax(L2D[i])`` over
    every j, i itself included, the first on a tie, a donor even when no overlap is left (``train.py``)."""
    donors: list[int | None] = []
    for i, need in enumerate(scarce):
        overlap = [len(set(need) & set(a)) for a in abundant]
        if code_rule:
            donors.append(int(np.argmax(overlap)))
            continue
        best = max((o, -j) for j, o in enumerate(overlap) if j != i) if len(overlap) > 1 else (0, 0)
        donors.append(-best[1] if best[0] > 0 else None)
    return donors
