"""FedGen (Zhu, Hong & Zhou, ICML 2021): data-free knowledge distillation with a feature-space generator.

Server, each round after the clients trained: train a light generator G(ε, y) → h (a penultimate representation,
``model.embed``'s space) so that the received clients' last layers classify h as y. With w_{k,y} = n_{k,y} / Σ_j n_{j,y}
over the received clients (label counts uploaded once), ``generator_steps`` Adam steps on batches of ``batch`` labels:
    min_G  T + η·exp(−mean_{i,j} d₂(ε_i, ε_j)·d₁(h_i, h_j))    (diversity: the authors' ``DiversityLoss``, over all
                                                        B² pairs; d₁ mean |Δ|, d₂ mean Δ² over the dimensions)
    T = CE( Σ_k w_{k,y} classify_k(G(ε, y)), y )                   (``teacher: ensemble``, the paper's ensemble)
    T = Σ_k mean_i(w_{k,y_i}) · mean_i CE(classify_k(G(ε_i, y_i)), y_i)   (``teacher: heads``, what the authors' code
                                                   computes: its per-sample weighting broadcasts (B,)·(B, 1) to B×B)
Client, from the round after the first generator step (t = round):
    CE(model(x), y) + r·α_t·E_{ŷ} CE(classify(G(ε, ŷ)), ŷ) + β_t·KL( softmax(classify(G(ε, y))) ‖ softmax(model(x)) )
with α_t = α, β_t = β (``alpha_decay: 1``) or the code's max(1e-4, α·0.98^(t−1)) (``alpha_decay: 0.98``), r = 1 or the
code's ``batch`` / local batch size (``gen_ratio``); the β term (the code's "latent" loss, not in the paper) is off
at β = 0. Labels: ŷ ∼ p̂ (the pooled label counts, ``labels: prior``, the paper) or uniform over the labels held
(``labels: uniform``, the code: on the server over the labels a received client holds, on the client over all held).
ε ∼ N(0, I) (``noise: normal``, the paper) or U[0, 1) (``noise: uniform``, the code's ``torch.rand``). The generator
and its Adam (``generator_lr``·``generator_lr_decay``^(rounds trained so far), L2 ``generator_weight_decay``) persist
across rounds as method state (checkpointed).

Random streams: the server draws, per step, labels then ε from ``ctx.rng("fedgen-server", round)``; the client,
per batch, labels ŷ, their ε, then (β > 0) the ε for the batch's labels, from ``ctx.rng("fedgen-client", round, k)``.

Options for FLea's description of its FedGen baseline ("a generator of four ConvTranspose2d layers"):
``space: cut`` generates the feature maps at the model's cut (``features``; scored by ``head``) instead of penultimate
representations, and ``generator: conv`` is four transposed convolutions up to that map's size instead of an MLP.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fed.algorithms.base import Algorithm

CHOICES = {
    "space": ("penultimate", "cut"),
    "generator": ("mlp", "conv"),
    "teacher": ("ensemble", "heads"),
    "labels": ("prior", "uniform"),
    "noise": ("normal", "uniform"),
}


def label_weights(counts: torch.Tensor) -> torch.Tensor:
    """w[k, y] = n_{k,y} / Σ_j n_{j,y} (0 for a label nobody holds); ``counts`` is (clients, classes)."""
    total = counts.sum(0, keepdim=True)
    return torch.where(total > 0, counts / total.clamp_min(1e-12), torch.zeros_like(counts))


def diversity_loss(noise: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The authors' ``DiversityLoss(metric='l1')``: exp(−mean over all B² ordered pairs (i, j) of
    mean_d (ε_i − ε_j)² · mean_d |h_i − h_j|)."""
    out = out.flatten(1)
    d_out = (out[:, None] - out[None]).abs().mean(2)
    d_noise = (noise[:, None] - noise[None]).pow(2).mean(2)
    return torch.exp(-(d_noise * d_out).mean())


def conv_generator(inputs: int, shape: tuple[int, ...], width: int = 64) -> nn.Sequential:
    """Four ConvTranspose2d layers from a 1×1 map of ``inputs`` channels to a (C, H, W) map: the first to an
    eighth of the size, three doubling it, the result cropped to H×W."""
    if len(shape) != 3:
        raise ValueError(f"fedgen: a conv generator makes feature maps (C, H, W), not shape {shape}; use space: cut")
    c, h, w = shape
    base = (-(-h // 8), -(-w // 8))

    def up(cin, cout):
        return [nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(
        nn.ConvTranspose2d(inputs, 2 * width, base), nn.BatchNorm2d(2 * width), nn.ReLU(),
        *up(2 * width, width), *up(width, width // 2),
        nn.ConvTranspose2d(width // 2, c, 4, stride=2, padding=1),
    )  # fmt: skip


class Generator(nn.Module):
    """G(ε, y): [ε, one-hot(y)] → Linear → BN → ReLU → Linear (the authors' generator), or ``conv_generator``."""

    def __init__(
        self,
        noise_dim: int,
        num_classes: int,
        feature_shape: tuple[int, ...],
        hidden: int = 256,
        kind: str = "mlp",
        noise: str = "normal",
    ):
        super().__init__()
        self.noise_dim, self.num_classes, self.feature_shape = noise_dim, num_classes, feature_shape
        self.kind, self.noise = kind, noise
        if kind == "conv":
            self.net = conv_generator(noise_dim + num_classes, feature_shape)
        else:
            out = int(torch.tensor(feature_shape).prod())
            self.net = nn.Sequential(
                nn.Linear(noise_dim + num_classes, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, out)
            )

    def forward(self, y: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        draw = torch.randn if self.noise == "normal" else torch.rand
        eps = draw(len(y), self.noise_dim, generator=generator).to(y.device)
        z = torch.cat([eps, F.one_hot(y, self.num_classes).to(eps.dtype)], 1)
        if self.kind == "conv":
            h = self.net(z[:, :, None, None])[..., : self.feature_shape[1], : self.feature_shape[2]]
            return eps, h.contiguous()
        return eps, self.net(z).view(len(y), *self.feature_shape)


class FedGen(Algorithm):
    name = "fedgen"
    vectorise = True

    def __init__(
        self,
        alpha: float = 1.0,
        beta: float = 0.0,
        alpha_decay: float = 1.0,
        gen_ratio: bool = False,
        eta: float = 1.0,
        noise_dim: int = 32,
        hidden: int = 256,
        generator_steps: int = 50,
        generator_lr: float = 3e-4,
        generator_lr_decay: float = 0.98,
        generator_weight_decay: float = 1e-2,
        batch: int = 32,
        start_round: int = 1,
        teacher: str = "ensemble",
        labels: str = "prior",
        noise: str = "normal",
        space: str = "penultimate",
        generator: str = "mlp",
    ):
        given = {"space": space, "generator": generator, "teacher": teacher, "labels": labels, "noise": noise}
        for key, value in given.items():
            if value not in CHOICES[key]:
                raise ValueError(f"fedgen: {key} must be one of {CHOICES[key]}, got {value!r}")
        self.alpha, self.beta, self.alpha_decay, self.gen_ratio, self.eta = alpha, beta, alpha_decay, gen_ratio, eta
        self.noise_dim, self.hidden, self.generator_steps, self.batch = noise_dim, hidden, generator_steps, batch
        self.generator_lr, self.generator_lr_decay = generator_lr, generator_lr_decay
        self.generator_weight_decay, self.start_round = generator_weight_decay, start_round
        self.teacher, self.labels, self.noise, self.space = teacher, labels, noise, space
        self.generator_kind = generator
        self._trained, self._trainings = False, 0

    def represent(self, model, x):
        return model.embed(x) if self.space == "penultimate" else model.features(x)

    def score(self, model, h):
        """Logits of generated representations: the last layer (penultimate) or the rest of the model (cut)."""
        return model.classify(h) if self.space == "penultimate" else model.head(h)

    def setup(self, ctx):
        ctx.model.eval()
        with torch.no_grad():
            shape = tuple(self.represent(ctx.model, torch.zeros(2, *ctx.input_shape, device=ctx.device)).shape[1:])
        torch.manual_seed(ctx.seed_int("generator-init"))
        self.generator = Generator(
            self.noise_dim, ctx.num_classes, shape, self.hidden, self.generator_kind, self.noise
        ).to(ctx.device)
        self.optimizer = torch.optim.Adam(
            self.generator.parameters(), lr=self.generator_lr, weight_decay=self.generator_weight_decay
        )
        self.counts = torch.stack(  # on the CPU, where the run's random generators draw labels
            [torch.bincount(ctx.client_data(k)[1], minlength=ctx.num_classes).cpu() for k in range(ctx.num_clients)]
        ).to(torch.get_default_dtype())
        ctx.share("label_counts", ctx.num_clients)

    def draw_labels(self, n: int, generator: torch.Generator, counts: torch.Tensor) -> torch.Tensor:
        """n labels ∝ ``counts`` (labels: prior) or uniform over the labels with counts > 0 (labels: uniform)."""
        if self.labels == "prior":
            return torch.multinomial(counts, n, replacement=True, generator=generator)
        held = counts.nonzero().flatten()
        return held[torch.randint(len(held), (n,), generator=generator)]

    def decayed(self, weight: float, round_: int) -> float:
        """The code's ``exp_lr_scheduler``: max(1e-4, weight·decay^(round − 1)); the weight itself at decay 1."""
        return weight if self.alpha_decay == 1 else max(1e-4, weight * self.alpha_decay ** (round_ - 1))

    def client_update(self, ctx, client):
        ctx.model.load_state_dict(ctx.global_state)
        return self.train_locally(
            ctx, client, *ctx.client_data(client), streams={"rng": ctx.rng("fedgen-client", ctx.round, client)}
        )

    def step_draws(self, model, x, y, local, ctx):
        """Once the generator is trained: the step's generated labels and features (the generator is fixed during
        local training), and with ``beta`` > 0 the features it generates for the batch's own labels."""
        if not self._trained:
            return {}
        g = local.streams["rng"]
        y_gen = self.draw_labels(self.batch, g, self.counts.sum(0)).to(x.device)
        self.generator.eval()
        with torch.no_grad():
            drawn = {"y_gen": y_gen, "h_gen": self.generator(y_gen, g)[1]}
            if self.beta > 0:
                drawn["h_own"] = self.generator(y, g)[1]
        return drawn

    def local_loss(self, model, x, y, local, ctx):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if not self._trained:
            return loss
        d = local.draws
        ratio = self.batch / ctx.cfg.batch_size if self.gen_ratio else 1.0
        loss = loss + ratio * self.decayed(self.alpha, ctx.round) * F.cross_entropy(
            self.score(model, d["h_gen"]), d["y_gen"]
        )
        if self.beta > 0:  # the code's "latent" term: the generator's prediction for the batch's labels as a target
            with torch.no_grad():
                target = F.softmax(self.score(model, d["h_own"]), 1)
            kl = F.kl_div(F.log_softmax(logits, 1), target, reduction="batchmean")
            loss = loss + self.decayed(self.beta, ctx.round) * kl
        return loss

    def teacher_loss(self, logits: list[torch.Tensor], w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """T over the received heads' logits; ``w`` is (heads, batch): w_{k,y_i}."""
        if self.teacher == "ensemble":
            return F.cross_entropy(sum(wk[:, None] * lk for wk, lk in zip(w, logits)), y)
        return sum(wk.mean() * F.cross_entropy(lk, y) for wk, lk in zip(w, logits))

    def server_update(self, ctx, model, results):
        if ctx.round < self.start_round - 1:  # FedAvg until then (FLea's FedGen: 30 rounds); trained for start_round
            return
        heads = []  # the received client models, frozen (their heads score the generated features)
        for r in results:
            head = ctx.new_model().eval().requires_grad_(False)
            head.load_state_dict(r.state)
            heads.append(head)
        received = self.counts[[r.client for r in results]]
        weights = label_weights(received).to(ctx.device)
        pool = received.sum(0) if self.labels == "uniform" else self.counts.sum(0)
        for group in self.optimizer.param_groups:  # the code's ExponentialLR, stepped after each round's training
            group["lr"] = self.generator_lr * self.generator_lr_decay**self._trainings
        gen = ctx.rng("fedgen-server", ctx.round)
        self.generator.train()
        total = 0.0
        for _ in range(self.generator_steps):
            y = self.draw_labels(self.batch, gen, pool).to(ctx.device)
            eps, h = self.generator(y, gen)
            teacher = self.teacher_loss([self.score(head, h) for head in heads], weights[:, y], y)
            loss = teacher + self.eta * diversity_loss(eps, h)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            total += loss.item()
        self._trained, self._trainings = True, self._trainings + 1
        ctx.round_metrics["generator_loss"] = total / max(self.generator_steps, 1)

    def state_dict(self):
        return {
            "generator": self.generator.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "trained": self._trained,
            "trainings": self._trainings,
        }

    def load_state_dict(self, state):
        self.generator.load_state_dict(state["generator"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._trained, self._trainings = state["trained"], state["trainings"]
