"""FedGen (Zhu, Hong & Zhou, ICML 2021): data-free knowledge distillation with a feature-space generator.

Server, after aggregation: train a light generator G(ε, y) → h (a penultimate representation, ``model.embed``'s
space) so that the ensemble of the received clients' last layers, each weighted per label by its share of that label,
classifies h as y:
    min_G  E_{y∼p̂, ε∼N(0,I)} CE( Σ_k w_{k,y} classify_k(G(ε, y)), y ) + L_div,   w_{k,y} = n_{k,y} / Σ_j n_{j,y}
Client: CE on its data + α · E_{y∼p̂} CE(classify(G(ε, y)), y) — the generator's knowledge as a regulariser.
p̂ is the label distribution the clients uploaded (counts only). The generator is method state (checkpointed).

Options for FLea's description of its FedGen baseline ("a generator of four ConvTranspose2d layers"):
``space: cut`` generates the feature maps at the model's cut (``features``; scored by ``head``) instead of penultimate
representations, and ``generator: conv`` is four transposed convolutions up to that map's size instead of an MLP.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fed.algorithms.base import Algorithm


def label_weights(counts: torch.Tensor) -> torch.Tensor:
    """w[k, y] = n_{k,y} / Σ_j n_{j,y} (0 for a label nobody holds); ``counts`` is (clients, classes)."""
    total = counts.sum(0, keepdim=True)
    return torch.where(total > 0, counts / total.clamp_min(1e-12), torch.zeros_like(counts))


def diversity_loss(noise: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """FedGen's diversity regulariser: exp(−mean(d_noise · d_out)) over sample pairs."""
    return torch.exp(-(torch.cdist(noise, noise) * torch.cdist(out.flatten(1), out.flatten(1))).mean())


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
    def __init__(
        self, noise_dim: int, num_classes: int, feature_shape: tuple[int, ...], hidden: int = 256, kind: str = "mlp"
    ):
        super().__init__()
        self.noise_dim, self.num_classes, self.feature_shape, self.kind = noise_dim, num_classes, feature_shape, kind
        if kind == "conv":
            self.net = conv_generator(noise_dim + num_classes, feature_shape)
        else:
            out = int(torch.tensor(feature_shape).prod())
            self.net = nn.Sequential(
                nn.Linear(noise_dim + num_classes, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, out)
            )

    def forward(self, y: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        eps = torch.randn(len(y), self.noise_dim, generator=generator).to(y.device)
        z = torch.cat([eps, F.one_hot(y, self.num_classes).float()], 1)
        if self.kind == "conv":
            h = self.net(z[:, :, None, None])[..., : self.feature_shape[1], : self.feature_shape[2]]
            return eps, h.contiguous()
        return eps, self.net(z).view(len(y), *self.feature_shape)


class FedGen(Algorithm):
    name = "fedgen"

    def __init__(
        self,
        alpha: float = 1.0,
        noise_dim: int = 32,
        generator_steps: int = 50,
        generator_lr: float = 1e-3,
        batch: int = 32,
        start_round: int = 1,
        space: str = "penultimate",
        generator: str = "mlp",
    ):
        if space not in ("penultimate", "cut") or generator not in ("mlp", "conv"):
            raise ValueError(f"fedgen: space penultimate|cut and generator mlp|conv, got {space!r}, {generator!r}")
        self.alpha, self.noise_dim, self.generator_steps = alpha, noise_dim, generator_steps
        self.generator_lr, self.batch, self.start_round = generator_lr, batch, start_round
        self.space, self.generator_kind = space, generator
        self._trained = False

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
        self.generator = Generator(self.noise_dim, ctx.num_classes, shape, kind=self.generator_kind).to(ctx.device)
        self.counts = torch.stack(
            [torch.bincount(ctx.client_data(k)[1], minlength=ctx.num_classes) for k in range(ctx.num_clients)]
        ).float()
        ctx.share("label_counts", ctx.num_clients)

    def sample_labels(self, n: int, generator: torch.Generator) -> torch.Tensor:
        counts = self.counts.sum(0)  # drawn on the CPU, where the run's generators live
        return torch.multinomial(counts.cpu(), n, replacement=True, generator=generator).to(counts.device)

    def client_update(self, ctx, client):
        ctx.model.load_state_dict(ctx.global_state)
        return self.train_locally(
            ctx, client, *ctx.client_data(client), extra={"rng": ctx.rng("fedgen-client", ctx.round, client)}
        )

    def local_loss(self, model, x, y, local, ctx):
        loss = F.cross_entropy(model(x), y)
        if not self._trained:
            return loss
        y_gen = self.sample_labels(self.batch, local.extra["rng"]).to(x.device)
        self.generator.eval()
        with torch.no_grad():
            _, h = self.generator(y_gen, local.extra["rng"])
        return loss + self.alpha * F.cross_entropy(self.score(model, h), y_gen)

    def server_update(self, ctx, model, results):
        if ctx.round < self.start_round - 1:  # FedAvg until then (FLea's FedGen: 30 rounds); trained for start_round
            return
        heads = []  # the received client models, frozen (their heads score the generated features)
        for r in results:
            head = ctx.new_model().eval().requires_grad_(False)
            head.load_state_dict(r.state)
            heads.append(head)
        weights = label_weights(self.counts[[r.client for r in results]]).to(ctx.device)
        opt = torch.optim.Adam(self.generator.parameters(), lr=self.generator_lr)
        gen = ctx.rng("fedgen-server", ctx.round)
        self.generator.train()
        total = 0.0
        for _ in range(self.generator_steps):
            y = self.sample_labels(self.batch, gen).to(ctx.device)
            eps, h = self.generator(y, gen)
            logits = 0
            for j, head in enumerate(heads):
                logits = logits + weights[j, y][:, None] * self.score(head, h)
            loss = F.cross_entropy(logits, y) + diversity_loss(eps, h)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item()
        self._trained = True
        ctx.round_metrics["generator_loss"] = total / max(self.generator_steps, 1)

    def state_dict(self):
        return {"generator": self.generator.state_dict(), "trained": self._trained}

    def load_state_dict(self, state):
        self.generator.load_state_dict(state["generator"])
        self._trained = state["trained"]
