"""Private Sample Generation (PSG; Tang et al. 2023, Algorithm 2): a conditional GAN trained on one client's data
with DP-SGD on the discriminator, through Opacus.

Per step t (Algorithm 2, lines 3-20):
  - a Poisson-sampled batch of real (x_i, y_i), each sample in with probability q = B/|D| (the rate of the paper's
    accountant A(δ0, B, t, σ, |D|); ``sampling: loader`` takes Opacus' make_private rate 1/⌈|D|/B⌉ instead), and as
    many fakes x̃_i = G(z_i, y_i);
  - the discriminator's per-sample gradient of  ℓ_i = log D(x_i, y_i) + log(1 − D(G(z_i), y_i))  — real and fake of
    one index form one sample: Opacus accumulates the two forward passes' per-sample gradients before clipping —
    clipped to norm c, summed, noised with N(0, σ²c²I), divided by the expected batch q|D| (= B) (Opacus'
    DPOptimizer), an Adam step;
  - the generator's step on the same x̃_i through the updated discriminator, minimising log(1 − D(x̃_i, y_i))
    (line 14; ``generator_loss: non_saturating`` minimises −log D(x̃_i, y_i)): post-processing, no privacy cost;
  - ε_t of Opacus' RDP accountant; the first step with ε_t ≥ ε0 is revoked and training stops (lines 19-20), so
    the generator is the one after the last step with ε_t < ε0 (that step is simply never taken).

``PSGSettings.rounds`` is Table 2's "GAN 预定训练轮数 50": epochs over the local data (``schedule: epochs``,
default) or iterations of Algorithm 2 (``schedule: iterations``) — docs/deviations.md. ε0 = inf trains without
noise (Sec. 4.3: "不对 GAN 训练添加噪声"); clipping stays, so ε = ∞ differs from ε0 < ∞ only by the noise.
"""

from __future__ import annotations

import functools
import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from fed import checkpoint, identity
from fed.checkpoint import OutOfTime
from fed.data.datasets import info as dataset_info
from fed.ghost_clipping import clip_per_sample, recording
from fed.models.cgan import Discriminator, Generator

if TYPE_CHECKING:
    from fed.context import Context

# Opacus is imported inside the functions that use it: importing it calls logging.basicConfig (opacus.utils.
# module_utils), which would double every log line of the Snakemake process that reads the method registry.

GRAD_SAMPLE_MODES = ("hooks", "functorch", "ghost")
GAN_SIZE = 32  # the CGAN's image side (Sec. 4.1); 28×28 data are resized to it and back
STATE_EVERY = 50  # PSG steps between a client's kept training states (≈ 4 min on one CPU thread at paper scale)


@dataclass(frozen=True)
class PSGSettings:
    """Table 2's data-augmentation block, plus the choices the paper leaves open (docs/deviations.md)."""

    epsilon: float = 50.0  # ε0, the GAN's budget; inf: no noise
    delta: float = 1e-5
    noise_multiplier: float = 0.5  # σ
    max_grad_norm: float = 2.0  # c
    batch_size: int = 256  # B: the expected Poisson batch
    sampling: str = "batch"  # Poisson rate q: "batch" B/|D| (the paper's A(δ0, B, t, σ, |D|)); "loader" 1/⌈|D|/B⌉
    rounds: int = 50
    schedule: str = "epochs"  # "epochs": rounds passes over the data; "iterations": rounds steps of Algorithm 2
    noise_dim: int = 10
    lr: float = 2e-4
    beta1: float = 0.5
    beta2: float = 0.999
    width: int = 64  # channel unit of both networks (Fig. 3's widths are not in the text)
    generator_loss: str = "saturating"  # Algorithm 2 line 14: minimise log(1 − D(G(z))); "non_saturating": −log D(G(z))
    # how the discriminator's per-sample gradients are clipped: "ghost" (fed.ghost_clipping) computes their norms
    # without them (1.70x hooks on a CPU); Opacus' "hooks" or "functorch" (torch.func per layer) materialise them.
    # The same clipped, noised gradient to rounding (tests/test_dafl.py; benchmarks/dp_modes.py times them). Opacus'
    # expanded weights reject D's label input, and its ghost clipping clips a sample's real and fake passes apart
    grad_sample_mode: str = "ghost"

    def __post_init__(self):
        if self.sampling not in ("batch", "loader"):
            raise ValueError(f"PSG sampling must be 'batch' or 'loader', got {self.sampling!r}")
        if self.schedule not in ("epochs", "iterations"):
            raise ValueError(f"PSG schedule must be 'epochs' or 'iterations', got {self.schedule!r}")
        if self.generator_loss not in ("saturating", "non_saturating"):
            raise ValueError(
                f"PSG generator_loss must be 'saturating' or 'non_saturating', got {self.generator_loss!r}"
            )
        if self.grad_sample_mode not in GRAD_SAMPLE_MODES:
            raise ValueError(f"PSG grad_sample_mode must be one of {GRAD_SAMPLE_MODES}, got {self.grad_sample_mode!r}")
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

    def steps(self, n: int) -> tuple[float, float, int, int]:
        """(q, expected batch, scheduled steps, steps within ε0) of a client of ``n`` samples: the one rate q of
        Algorithm 2's masks (line 4), its accountant and its stop rule (lines 19-20)."""
        q, expected_batch, per_epoch = sample_rate(n, self.batch_size, self.sampling)
        scheduled = math.ceil(self.rounds * (per_epoch if self.schedule == "epochs" else 1))
        budget = steps_within_budget(self.epsilon, q, self.noise_multiplier, self.delta, scheduled)
        return q, expected_batch, scheduled, budget


def sample_rate(n: int, batch_size: int, sampling: str = "batch") -> tuple[float, float, float]:
    """(q, expected batch, steps per epoch) for |D| = n: "batch" q = B/n (at most 1), expected batch qn = B, n/B steps
    an epoch; "loader" (what Opacus' make_private does with a DataLoader of ⌈n/B⌉ batches) q = 1/⌈n/B⌉, expected
    batch ⌊qn⌋, ⌈n/B⌉ steps an epoch."""
    if sampling == "batch":
        b = min(batch_size, n)
        return b / n, b, n / b
    per_epoch = math.ceil(n / batch_size)
    return 1 / per_epoch, int(n * (1 / per_epoch)), per_epoch  # Opacus' int(len(dataset) * sample_rate)


def epsilon_after(steps: int, q: float, sigma: float, delta: float) -> float:
    """ε of ``steps`` Poisson-subsampled Gaussian steps under Opacus' RDP analysis (its default orders)."""
    if steps == 0:
        return 0.0
    if sigma == 0:
        return math.inf
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import get_privacy_spent

    # compute_rdp(steps) is its one step's RDP times steps: the same product, the one step computed once
    rdp = _rdp_of_one_step(q, sigma) * steps
    return get_privacy_spent(orders=RDPAccountant.DEFAULT_ALPHAS, rdp=rdp, delta=delta)[0]


@functools.cache
def _rdp_of_one_step(q: float, sigma: float):
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import compute_rdp

    return compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=RDPAccountant.DEFAULT_ALPHAS)


def steps_within_budget(epsilon0: float, q: float, sigma: float, delta: float, scheduled: int) -> int:
    """The most steps (≤ ``scheduled``) whose ε stays < ε0: Algorithm 2 revokes the first step with ε_t ≥ ε0."""
    if not math.isfinite(epsilon0):
        return scheduled
    lo, hi = 0, scheduled  # ε is increasing in steps: bisect for the last step within budget
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if epsilon_after(mid, q, sigma, delta) < epsilon0:
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
    sample_rate: float  # q
    stopped_by_budget: bool
    seconds: float

    def record(self) -> dict[str, Any]:
        return asdict(self)


def _host_noise_optimizer(ghost: bool):
    """Opacus' DPOptimizer with its Gaussian noise drawn on the CPU and moved to the parameter's device: Opacus draws
    it on the device, from a generator of that device, which would make a GPU stage another draw than the CPU's.
    On the CPU the same call as Opacus' (``_generate_noise``, not in secure mode), so the same numbers. ``ghost``:
    the optimiser that reads an already clipped sum from ``.grad`` (fed.ghost_clipping) instead of clipping."""
    from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

    class HostNoiseDPOptimizer(DPOptimizerFastGradientClipping if ghost else DPOptimizer):
        def add_noise(self):
            std = self.noise_multiplier * self.max_grad_norm
            for p in self.params:
                _check_processed_flag(p.summed_grad)
                g = p.summed_grad
                noise = torch.zeros(g.shape, dtype=g.dtype)
                if std:
                    noise = torch.normal(0, std, g.shape, generator=self.generator, dtype=g.dtype)
                p.grad = (g + noise.to(g.device)).view_as(p)
                _mark_as_processed(p.summed_grad)

    return HostNoiseDPOptimizer


class _OpacusClipping:
    """The discriminator's clipped gradient from per-row gradients: Opacus' hooks or functorch accumulate a sample's
    real and fake passes before its DPOptimizer clips."""

    ghost = False

    def __init__(self, D: torch.nn.Module, functorch: bool):
        from opacus import GradSampleModule

        self.D = GradSampleModule(D, force_functorch=functorch)
        self.D.forbid_grad_accumulation()

    def no_rows(self) -> None:  # an empty Poisson batch: nothing to clip
        for p in self.D.parameters():
            p.grad_sample = p.new_zeros((0, *p.shape))

    def backward(self, x_real, x_fake, y, real, fake, max_grad_norm: float) -> torch.Tensor:
        """Per-row gradients of ℓ for the optimiser, which clips them at ``max_grad_norm`` itself; returns ℓ."""
        loss = F.binary_cross_entropy_with_logits(self.D(x_real, y), real)
        loss = loss + F.binary_cross_entropy_with_logits(self.D(x_fake, y), fake)
        loss.backward()
        return loss

    @contextmanager
    def frozen(self):
        """D for the generator's step: no gradients of its own, no per-row hooks (post-processing)."""
        self.D.disable_hooks()
        self.D.requires_grad_(False)
        try:
            yield self.D
        finally:
            self.D.requires_grad_(True)
            self.D.enable_hooks()


class _GhostClipping:
    """The discriminator's clipped gradient from fed.ghost_clipping: sample i's real and fake are rows i and n + i
    of one pass; its DPOptimizer reads the clipped sum from ``.grad``."""

    ghost = True

    def __init__(self, D: torch.nn.Module):
        self.D = D

    def no_rows(self) -> None:
        for p in self.D.parameters():
            p.grad = torch.zeros_like(p)

    def backward(self, x_real, x_fake, y, real, fake, max_grad_norm: float) -> torch.Tensor:
        """Σ_i c_i g_i in ``.grad``; returns ℓ."""
        with recording(self.D) as records:
            logits = self.D(torch.cat([x_real, x_fake]), torch.cat([y, y]))
        rows = F.binary_cross_entropy_with_logits(logits, torch.cat([real, fake]), reduction="none")
        clip_per_sample(records, rows, len(y), max_grad_norm)
        return rows.detach().view(2, -1).mean(1).sum()

    @contextmanager
    def frozen(self):
        self.D.requires_grad_(False)
        try:
            yield self.D
        finally:
            self.D.requires_grad_(True)


def train_psg(
    x: torch.Tensor,
    y: torch.Tensor,
    num_classes: int,
    settings: PSGSettings,
    seed: int,
    progress=None,
    device: str | torch.device = "cpu",
    state_path: Path | None = None,
    stop_at: float | None = None,
) -> PSGResult:
    """Algorithm 2 on one client's images ``x`` (in GAN space, (n, C, 32, 32)) and labels ``y``, on ``device``.
    Every random draw — initial weights, Poisson masks, generator inputs, DP-SGD's Gaussian noise — is taken on the
    CPU from the same seeded streams on every device, so a GPU run differs from a CPU run by kernel rounding only.

    ``state_path``: where the client's training state (both networks, both optimisers, the accountant's history and
    every random stream) is kept every ``STATE_EVERY`` steps and resumed from, by a run of the same settings, seed,
    data, code and device kind: a resumed client takes the steps an uninterrupted one takes. Past ``stop_at`` (a
    ``time.time()``) it keeps its state after the current step and raises ``OutOfTime``."""
    from opacus.accountants import RDPAccountant
    from opacus.validators import ModuleValidator

    started = time.perf_counter()
    torch.manual_seed(seed)
    channels, n, device = x.shape[1], len(y), torch.device(device)
    if device.type == "cuda":  # as a cell's engine: deterministic kernels, no TF32 (a client runs in its own process)
        from fed.device import reproducible_cuda

        reproducible_cuda()
    G = Generator(num_classes, channels, settings.noise_dim, settings.width).to(device)
    D = Discriminator(num_classes, channels, settings.width).to(device)
    x, y = x.to(device), y.to(device)
    ModuleValidator.validate(D, strict=True)
    opt_g = torch.optim.Adam(G.parameters(), lr=settings.lr, betas=(settings.beta1, settings.beta2))
    opt_d = torch.optim.Adam(D.parameters(), lr=settings.lr, betas=(settings.beta1, settings.beta2))
    # q: the one Poisson rate of the masks (line 4), the accountant and the stop rule (lines 19-20); a rate read
    # differently in any of them would spend a budget other than the one recorded
    q, expected_batch, scheduled, budget = settings.steps(n)
    sigma = settings.noise_multiplier if settings.private else 0.0
    # what PrivacyEngine.make_private assembles, at the rate q (make_private fixes q = 1/len(loader)); the
    # Poisson masks are drawn in the loop (line 4)
    mode = settings.grad_sample_mode
    clipping = _GhostClipping(D) if mode == "ghost" else _OpacusClipping(D, functorch=mode == "functorch")
    opt_d = _host_noise_optimizer(clipping.ghost)(
        opt_d,
        noise_multiplier=sigma,
        max_grad_norm=settings.max_grad_norm,
        expected_batch_size=expected_batch,
        generator=torch.Generator().manual_seed(seed + 2),
    )
    accountant = RDPAccountant()
    opt_d.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=q))
    masks, z_gen = torch.Generator().manual_seed(seed + 1), torch.Generator().manual_seed(seed + 3)
    real, fake = 1.0, 0.0
    streams = {"masks": masks, "z": z_gen, "noise": opt_d.generator}
    key = checkpoint.digest([asdict(settings), seed, checkpoint.tensor_hash(x, y), client_code(), device.type])

    def keep(step: int) -> None:  # everything step ``step + 1`` reads
        state = {"key": key, "code": client_code(), "step": step, "budget": budget}
        state |= {"seconds": earlier + time.perf_counter() - started}
        state |= {"G": G.state_dict()}
        state |= {
            "D": D.state_dict(),
            "opt_g": opt_g.state_dict(),
            "opt_d": opt_d.original_optimizer.state_dict(),
        }
        state |= {"history": list(accountant.history), "rng": torch.get_rng_state()}
        checkpoint.save(state_path, state | {k: g.get_state() for k, g in streams.items()})

    first, earlier = 1, 0.0
    kept = checkpoint.load(state_path, device, lambda msg: print(msg, file=progress)) if state_path else None
    if kept is not None and kept["key"] == key:
        G.load_state_dict(kept["G"])
        D.load_state_dict(kept["D"])
        opt_g.load_state_dict(kept["opt_g"])
        opt_d.original_optimizer.load_state_dict(kept["opt_d"])
        accountant.history = list(kept["history"])
        torch.set_rng_state(kept["rng"].cpu())
        for k, g in streams.items():
            g.set_state(kept[k].cpu())
        first, earlier = kept["step"] + 1, kept["seconds"]
    for t in range(first, budget + 1):
        if state_path is not None and t > first and (t - 1) % STATE_EVERY == 0:
            keep(t - 1)
        if stop_at is not None and t > first and time.time() >= stop_at:
            if state_path is not None:
                keep(t - 1)
            raise OutOfTime(t - 1)
        idx = (torch.rand(n, generator=masks) < q).nonzero().reshape(-1).to(device)  # line 4: Poisson, each w.p. q
        opt_d.zero_grad(set_to_none=True)
        if not len(idx):  # an empty Poisson batch is a step too: the noise alone
            clipping.no_rows()
            opt_d.step()
            continue
        xb, yb = x[idx], y[idx]
        x_fake = G(torch.randn(len(idx), settings.noise_dim, generator=z_gen).to(device), yb)  # lines 3, 6
        target = {v: torch.full((len(yb),), v, device=device) for v in (real, fake)}
        # discriminator: one DP-SGD step on −ℓ_i (real and fake of index i are one sample), lines 7-12
        loss_d = clipping.backward(xb, x_fake.detach(), yb, target[real], target[fake], settings.max_grad_norm)
        opt_d.step()
        # generator: through the updated discriminator, without per-sample gradients (post-processing), lines 13-18
        opt_g.zero_grad(set_to_none=True)
        with clipping.frozen() as frozen_D:
            logits = frozen_D(x_fake, yb)
            if settings.generator_loss == "saturating":  # log(1 − D) = −BCE(·, fake)
                loss_g = -F.binary_cross_entropy_with_logits(logits, target[fake])
            else:
                loss_g = F.binary_cross_entropy_with_logits(logits, target[real])
            loss_g.backward()
        opt_g.step()
        if progress is not None and (t % 50 == 0 or t == budget):
            losses = f"loss_d {loss_d.item():.3f} loss_g {loss_g.item():.3f}"
            print(f"  PSG step {t}/{budget} {losses}", file=progress, flush=True)
    if state_path is not None:  # the client is done: its generator goes to the stage, its state away
        for path in (state_path, checkpoint.previous(state_path)):
            path.unlink(missing_ok=True)
    steps = sum(k for _, _, k in accountant.history)  # the steps the accountant saw (= budget)
    epsilon = 0.0 if not steps else accountant.get_epsilon(settings.delta) if sigma > 0 else math.inf
    if settings.private and not epsilon < settings.epsilon:  # line 20: no step with ε_t ≥ ε0 is ever taken
        raise RuntimeError(
            f"PSG overspent its budget: ε = {epsilon} after {steps} steps at q = {q}, ε0 = {settings.epsilon}"
        )
    return PSGResult(
        {k: v.detach().cpu().clone() for k, v in G.state_dict().items()},
        steps,
        scheduled,
        epsilon,
        q,
        budget < scheduled,
        earlier + time.perf_counter() - started,
    )


def client_code() -> str:
    """The code one client's PSG executes: this module's import closure (``fed.identity.module_hash``), not the FL
    engine's nor the stage's scheduling (``fed.gan_stage``). A kept state or a finished client of other code is
    trained again; one of other scheduling is not."""
    return identity.module_hash(__name__)


def client_record(request: dict[str, Any], progress=None) -> dict[str, Any]:
    """One client's PSG from its ``request`` (train_psg's arguments, ``settings`` as a dict): the settings, the
    code (``client_code``) and the result, as the stage stores them."""
    settings = PSGSettings(**request["settings"])
    args = [request[k] for k in ("x", "y", "num_classes")]
    state = Path(request["state"]) if request.get("state") else None
    kwargs = {"device": request.get("device", "cpu"), "state_path": state, "stop_at": request.get("stop_at")}
    result = train_psg(*args, settings, request["seed"], progress, **kwargs)
    return {"settings": request["settings"], "code": client_code(), **result.record()}


def client_request(
    ctx: Context, dataset: str, settings: PSGSettings, k: int, work_dir: Path, stop_at: float | None = None
) -> dict[str, Any]:
    """Client ``k``'s PSG request (``client_record``'s input): its training split in GAN space, its own seeded
    stream (``psg``, k) and its state file in ``work_dir``."""
    meta = dataset_info(dataset)
    x, y = ctx.client_data(k)
    x = to_gan_space(x.cpu().float(), meta.mean, meta.std)
    args = {"settings": asdict(settings), "seed": ctx.seed_int("psg", k), "device": str(ctx.device)}
    resume = {"state": str(Path(work_dir) / f"client{k}.state.pt"), "stop_at": stop_at}
    return {"x": x, "y": y.cpu(), "num_classes": ctx.num_classes, **args, **resume}


def generate(
    generator_state: dict[str, torch.Tensor],
    labels: torch.Tensor,
    num_classes: int,
    channels: int,
    settings: PSGSettings,
    seed: int,
) -> torch.Tensor:
    """Algorithm 2 lines 22-26: G(z, ŷ_k) for fresh noise z, in GAN space (n, C, 32, 32). No label, no sample: a
    client whose ⌊γ|D_i|⌋ is 0 (or whose private counts all came out 0) shares nothing."""
    if not len(labels):
        return torch.zeros(0, channels, GAN_SIZE, GAN_SIZE)
    G = Generator(num_classes, channels, settings.noise_dim, settings.width)
    G.load_state_dict(generator_state)
    G.eval()
    z = torch.randn(len(labels), settings.noise_dim, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return G(z, labels.cpu())
