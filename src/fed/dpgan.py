"""Private Sample Generation (PSG; Tang et al. 2023, Algorithm 2): a conditional GAN trained on one client's data
with DP-SGD on the discriminator, through Opacus.

Per step t (Algorithm 2, lines 3-20):
  - a Poisson-sampled batch of real (x_i, y_i) and as many fakes G(z_i, y_i);
  - the discriminator's per-sample gradient of  ℓ_i = log D(x_i, y_i) + log(1 − D(G(z_i), y_i))  — real and fake of
    one index form one sample: Opacus accumulates the two forward passes' per-sample gradients before clipping —
    clipped to norm c, summed, noised with N(0, σ²c²I), averaged (Opacus' DPOptimizer), an Adam step;
  - the generator's step through the updated discriminator: post-processing, no privacy cost;
  - the accountant's ε_t; the step that would take ε_t past ε0 is never taken (lines 19-20: stop and revoke).

``PSGSettings.rounds`` is Table 2's "GAN 预定训练轮数 50": epochs over the local data (``schedule: epochs``,
default) or iterations of Algorithm 2 (``schedule: iterations``) — docs/deviations.md. ε0 = inf trains without
noise (Sec. 4.3: "不对 GAN 训练添加噪声"); clipping stays, so ε = ∞ differs from ε0 < ∞ only by the noise.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from fed.models.cgan import Discriminator, Generator

# Opacus is imported inside the functions that use it: importing it calls logging.basicConfig (opacus.utils.
# module_utils), which would double every log line of the Snakemake process that reads the method registry.

GAN_SIZE = 32  # the CGAN's image side (Sec. 4.1); 28×28 data are resized to it and back


@dataclass(frozen=True)
class PSGSettings:
    """Table 2's data-augmentation block, plus the choices the paper leaves open (docs/deviations.md)."""

    epsilon: float = 50.0  # ε0, the GAN's budget; inf: no noise
    delta: float = 1e-5
    noise_multiplier: float = 0.5  # σ
    max_grad_norm: float = 2.0  # c
    batch_size: int = 256  # expected Poisson batch (sample rate = 1 / ⌈n / B⌉, Opacus' convention)
    rounds: int = 50
    schedule: str = "epochs"  # "epochs": rounds passes over the data; "iterations": rounds steps of Algorithm 2
    noise_dim: int = 10
    lr: float = 2e-4
    beta1: float = 0.5
    beta2: float = 0.999
    width: int = 64  # channel unit of both networks (Fig. 3's widths are not in the text)
    generator_loss: str = "non_saturating"  # Algorithm 2 line 14 writes log(1 − D(G(z))): "saturating"

    def __post_init__(self):
        if self.schedule not in ("epochs", "iterations"):
            raise ValueError(f"PSG schedule must be 'epochs' or 'iterations', got {self.schedule!r}")
        if self.generator_loss not in ("saturating", "non_saturating"):
            raise ValueError(
                f"PSG generator_loss must be 'saturating' or 'non_saturating', got {self.generator_loss!r}"
            )
        if not self.epsilon > 0 or not 0 < self.delta < 1:
            raise ValueError(f"PSG needs epsilon > 0 and 0 < delta < 1, got ({self.epsilon}, {self.delta})")

    @classmethod
    def from_params(cls, params: dict[str, Any] | None) -> PSGSettings:
        params = dict(params or {})
        unknown = set(params) - set(asdict(cls()))
        if unknown:
            raise TypeError(f"unknown PSG (GAN) options {sorted(unknown)}; valid: {sorted(asdict(cls()))}")
        if "epsilon" in params:
            params["epsilon"] = float(params["epsilon"])  # YAML's .inf, or "inf"
        return cls(**params)

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)


def sample_rate(n: int, batch_size: int) -> float:
    """Opacus' Poisson sampling rate for a loader of ⌈n / B⌉ batches."""
    return 1 / math.ceil(n / batch_size)


def epsilon_after(steps: int, q: float, sigma: float, delta: float) -> float:
    """ε of ``steps`` Poisson-subsampled Gaussian steps under Opacus' RDP analysis (its default orders)."""
    if steps == 0:
        return 0.0
    if sigma == 0:
        return math.inf
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    orders = RDPAccountant.DEFAULT_ALPHAS
    rdp = compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders)
    return get_privacy_spent(orders=orders, rdp=rdp, delta=delta)[0]


def steps_within_budget(epsilon0: float, q: float, sigma: float, delta: float, scheduled: int) -> int:
    """The most steps (≤ ``scheduled``) whose ε stays ≤ ε0: Algorithm 2 stops before the step that would exceed it."""
    if not math.isfinite(epsilon0):
        return scheduled
    lo, hi = 0, scheduled  # ε is increasing in steps: bisect for the last step within budget
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if epsilon_after(mid, q, sigma, delta) <= epsilon0:
            lo = mid
        else:
            hi = mid - 1
    return lo


def to_gan_space(x: torch.Tensor, mean, std) -> torch.Tensor:
    """Dataset-normalised images → the GAN's [-1, 1] at 32×32."""
    raw = x * torch.tensor(std).view(1, -1, 1, 1) + torch.tensor(mean).view(1, -1, 1, 1)
    if raw.shape[-1] != GAN_SIZE:
        raw = F.interpolate(raw, size=GAN_SIZE, mode="bilinear", align_corners=False)
    return (raw * 2 - 1).clamp(-1, 1).contiguous()


def from_gan_space(g: torch.Tensor, mean, std, size: int) -> torch.Tensor:
    """The GAN's [-1, 1] at 32×32 → dataset-normalised images of side ``size``."""
    raw = (g + 1) / 2
    if size != GAN_SIZE:
        raw = F.interpolate(raw, size=size, mode="bilinear", align_corners=False)
    return (raw - torch.tensor(mean).view(1, -1, 1, 1)) / torch.tensor(std).view(1, -1, 1, 1)


@dataclass
class PSGResult:
    generator: dict[str, torch.Tensor]  # the generator's state: all that ever leaves PSG
    steps: int  # discriminator steps taken
    scheduled_steps: int
    epsilon: float  # Opacus' accountant after the last step (inf without noise)
    sample_rate: float
    stopped_by_budget: bool
    seconds: float

    def record(self) -> dict[str, Any]:
        return asdict(self)


def train_psg(
    x: torch.Tensor, y: torch.Tensor, num_classes: int, settings: PSGSettings, seed: int, progress=None
) -> PSGResult:
    """Algorithm 2 on one client's images ``x`` (in GAN space, (n, C, 32, 32)) and labels ``y``."""
    from opacus import PrivacyEngine

    started = time.perf_counter()
    torch.manual_seed(seed)
    channels, n = x.shape[1], len(y)
    G = Generator(num_classes, channels, settings.noise_dim, settings.width)
    D = Discriminator(num_classes, channels, settings.width)
    opt_g = torch.optim.Adam(G.parameters(), lr=settings.lr, betas=(settings.beta1, settings.beta2))
    opt_d = torch.optim.Adam(D.parameters(), lr=settings.lr, betas=(settings.beta1, settings.beta2))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y),
        batch_size=settings.batch_size,
        generator=torch.Generator().manual_seed(seed + 1),  # Opacus' Poisson sampler draws from it
    )
    sigma = settings.noise_multiplier if settings.private else 0.0
    engine = PrivacyEngine(accountant="rdp")
    with warnings.catch_warnings():  # "secure RNG turned off": fine for research, said in the docs
        warnings.simplefilter("ignore")
        D, opt_d, loader = engine.make_private(
            module=D,
            optimizer=opt_d,
            data_loader=loader,
            noise_multiplier=sigma,
            max_grad_norm=settings.max_grad_norm,
            poisson_sampling=True,
            noise_generator=torch.Generator().manual_seed(seed + 2),
        )
    q = sample_rate(n, settings.batch_size)
    per_epoch = math.ceil(n / settings.batch_size)
    scheduled = settings.rounds * (per_epoch if settings.schedule == "epochs" else 1)
    budget = steps_within_budget(settings.epsilon, q, settings.noise_multiplier, settings.delta, scheduled)
    z_gen = torch.Generator().manual_seed(seed + 3)
    real, fake = 1.0, 0.0
    steps = 0
    while steps < budget:
        for xb, yb in loader:
            if steps == budget:
                break
            z = torch.randn(len(yb), settings.noise_dim, generator=z_gen)
            x_fake = G(z, yb)
            # discriminator: one DP-SGD step on ℓ_i (real and fake of index i are one sample)
            opt_d.zero_grad(set_to_none=True)
            loss_d = F.binary_cross_entropy_with_logits(D(xb, yb), torch.full((len(yb),), real)) + (
                F.binary_cross_entropy_with_logits(D(x_fake.detach(), yb), torch.full((len(yb),), fake))
            )
            loss_d.backward()
            opt_d.step()
            steps += 1
            # generator: through the updated discriminator, without per-sample gradients (post-processing)
            D.disable_hooks()
            D.requires_grad_(False)
            opt_g.zero_grad(set_to_none=True)
            logits = D(x_fake, yb)
            if settings.generator_loss == "saturating":
                loss_g = -F.binary_cross_entropy_with_logits(logits, torch.full((len(yb),), fake))
            else:
                loss_g = F.binary_cross_entropy_with_logits(logits, torch.full((len(yb),), real))
            loss_g.backward()
            opt_g.step()
            D.requires_grad_(True)
            D.enable_hooks()
            if progress is not None and (steps % 50 == 0 or steps == budget):
                losses = f"loss_d {loss_d.item():.3f} loss_g {loss_g.item():.3f}"
                print(f"  PSG step {steps}/{budget} {losses}", file=progress, flush=True)
    if not steps:
        epsilon = 0.0
    else:
        epsilon = engine.accountant.get_epsilon(settings.delta) if sigma > 0 else math.inf
    return PSGResult(
        {k: v.detach().clone() for k, v in G.state_dict().items()},
        steps,
        scheduled,
        epsilon,
        q,
        budget < scheduled,
        time.perf_counter() - started,
    )


def generate(
    generator_state: dict[str, torch.Tensor],
    labels: torch.Tensor,
    num_classes: int,
    channels: int,
    settings: PSGSettings,
    seed: int,
) -> torch.Tensor:
    """Algorithm 2 lines 22-26: G(z, ŷ_k) for fresh noise z, in GAN space (n, C, 32, 32)."""
    G = Generator(num_classes, channels, settings.noise_dim, settings.width)
    G.load_state_dict(generator_state)
    G.eval()
    z = torch.randn(len(labels), settings.noise_dim, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return G(z, labels.cpu())
