"""FedDPMS (Chen & Vikalo, FL-CV workshop 2023, slides): FL aided by differentially private synthetic data.

Stage I, preliminary training (rounds 1..P):
  each client trains a VAE — encoder E, classifier, Mu/LogVar heads, decoder D — on
      L = CE(ŷ, y) + λ (KLD(q ‖ N(0, I)) + MSE(x̂, x)),
  MSE summed over pixels and the KLD, by definition a sum over latent dimensions (``kld: sum``), averaged over them
  by default (``kld: mean``, the code's ``.mean()``: 1/d of it), both averaged over the batch; E, the classifier
  and Mu/LogVar are averaged every round (the preset's ``aggregation``: the code's ``average_weights`` is the
  unweighted mean); each client keeps its own decoder; at
  round P every client uploads its decoder and the server averages them (the same rule) into the global decoder D̄.
  Stage I is its own DAG node (the ``vae_prelim`` stage), shared by every cell with the same λ, P (and KLD scale).
Stage II, DPMS (once, at round P + 1, with round P's global model — the E and classifier every client holds):
  donor j, for each abundant class c: a class mean and a noise std (``fed.dpms``) —
      ``noise: calibrated`` (default): z_j^c = mean of clip_C(Mu(E(x))) over its N_j^c samples, std σ·2C/N_j^c;
      ``noise: code``: the official code's unclipped mean of reparameterised draws, std σ;
  repeatedly z̃ = z_j^c + N(0, std² I), keep z̃ if classifier(D̄(z̃)) = c, until α are kept;
  server: knows every client's abundant / scarce classes and matches each receiver to the donor that is abundant
      in most of its scarce classes; forwards that donor's kept z̃ (latents, never data or D_j) of the classes the
      receiver needs (``send_classes: needed``) or of all the donor's abundant classes (``all``, the code's rule);
  receiver: decodes them with D̄, merges (D̄(z̃), c) into its data and drops the decoders.
  Then FedAvg with cross-entropy on the augmented data to the last round.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from fed.algorithms.base import Algorithm
from fed.dpms import (
    abundant_and_scarce,
    class_mean,
    code_class_mean,
    epsilon_classical,
    epsilon_exact,
    match_clients,
    noisy_mean_pool,
    sensitivity,
)
from fed.models.base import stochastic
from fed.models.vae import vae_modules
from fed.stages import Stage
from fed.training import predict

EXAMPLES = 8  # noisy means per class kept in the run's history for the figures


def vae_loss(model, x, y, vae_weight: float, kld: str = "mean", eps: torch.Tensor | None = None):
    """Stage I's objective: CE + λ (KLD + MSE). MSE summed over pixels and averaged over the batch (the scale of the
    code's BCE summed over pixels / B); KLD averaged over the batch and the latent dimensions (``kld: mean``: the
    code's ``.mean()``, Localupdate.py) or summed over them (``kld: sum``, the KL divergence of the d-dimensional
    Gaussians as defined; the code's mean is 1/d of it).
    ``eps``: the reparameterisation's N(0, I) draw (``reparameterisation_noise``), drawn here when not given."""
    h = model.features(x).flatten(1)
    mu, logvar = model.extras["mu"](h), model.extras["logvar"](h)
    eps = reparameterisation_noise(model, len(y), mu.dtype).to(mu.device) if eps is None else eps
    z = mu + torch.exp(logvar / 2) * eps
    x_hat = model.extras["decoder"](z)
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp())
    kl = kl.mean() if kld == "mean" else kl.sum(1).mean()
    mse = (x_hat - x).pow(2).flatten(1).sum(1).mean()
    return F.cross_entropy(model.head(h), y) + vae_weight * (kl + mse)


def reparameterisation_noise(model, n: int, dtype: torch.dtype) -> torch.Tensor:
    """ε ~ N(0, I) of z = μ + σ·ε for n samples, from torch's per-client seeded CPU stream: the same draws on a GPU
    as on the CPU."""
    return torch.randn((n, model.extras["mu"].out_features), dtype=dtype)


class FedDPMS(Algorithm):
    name = "feddpms"
    vectorise = True

    def __init__(
        self,
        preliminary_rounds: int = 20,
        vae_weight: float = 0.05,
        noise_multiplier: float = 4.0,
        delta: float = 0.01,
        clip_norm: float | None = None,
        quota: int = 200,
        max_attempts: int = 2000,
        abundant: int = 3,
        mean: str = "vector",
        kld: str = "mean",
        noise: str = "calibrated",
        send_classes: str = "needed",
    ):
        if preliminary_rounds < 1:
            raise ValueError(f"FedDPMS: preliminary_rounds (P) must be >= 1, got {preliminary_rounds}")
        if not noise_multiplier > 0 or not 0 < delta < 1:
            raise ValueError(f"FedDPMS: need noise_multiplier > 0 and 0 < delta < 1, got {noise_multiplier}, {delta}")
        for key, value, valid in (
            ("mean", mean, ("vector", "scalar")),
            ("kld", kld, ("mean", "sum")),
            ("noise", noise, ("calibrated", "code")),
            ("send_classes", send_classes, ("needed", "all")),
        ):
            if value not in valid:
                raise ValueError(f"FedDPMS: {key} must be one of {valid}, got {value!r}")
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"FedDPMS: clip_norm must be > 0 (or null: √code_length), got {clip_norm}")
        self.preliminary_rounds, self.vae_weight = preliminary_rounds, vae_weight
        self.noise_multiplier, self.delta, self.clip_norm = noise_multiplier, delta, clip_norm
        self.quota, self.max_attempts, self.abundant, self.mean = quota, max_attempts, abundant, mean
        self.kld, self.noise, self.send_classes = kld, noise, send_classes
        self._received: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None  # receiver -> (z̃, labels)
        self._uploaded: dict[tuple[int, int], torch.Tensor] = {}  # (donor, class) -> its kept z̃ (the audit's)
        self._synthetic: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # receiver -> decoded (x, y)

    # ------------------------------------------------------------------ Stage I
    def extra_modules(self, model, input_shape):
        return vae_modules(model, input_shape)

    def stages(self):
        kld = {} if self.kld == "mean" else {"kld": self.kld}  # Stage I's identity; the default keeps its old key
        return {"warm": Stage.of("vae_prelim", rounds=self.preliminary_rounds, vae_weight=self.vae_weight, **kld)}

    def preliminary(self, ctx) -> bool:
        return ctx.round <= self.preliminary_rounds

    def select_clients(self, ctx):
        # round P is the upload round: every client sends its decoder
        return list(range(ctx.num_clients)) if ctx.round == self.preliminary_rounds else ctx.sample_clients()

    def step_draws(self, model, x, y, local, ctx):
        if not self.preliminary(ctx) or stochastic(model):  # after dropout's draws, in vae_loss (trains alone)
            return {}
        return {"eps": reparameterisation_noise(model, len(y), model.extras["mu"].weight.dtype).to(x.device)}

    def local_loss(self, model, x, y, local, ctx):
        if self.preliminary(ctx):
            return vae_loss(model, x, y, self.vae_weight, self.kld, local.draws.get("eps"))
        return F.cross_entropy(model(x), y)

    def client_update(self, ctx, client):
        ctx.model.load_state_dict(ctx.global_state)
        if self.preliminary(ctx):
            own = ctx.load_client_state(client).get("decoder")
            if own is not None:  # the client's own decoder; the first time, the common initial one
                ctx.model.extras["decoder"].load_state_dict(own)
            result = self.train_locally(ctx, client, *ctx.client_data(client))
            ctx.save_client_state(client, {"decoder": ctx.model.extras["decoder"].state_dict()})
            return result
        if self._received is None:
            self.share(ctx)
        return self.train_locally(ctx, client, *self.training_data(ctx, client))

    def aggregate(self, ctx, results):
        state = super().aggregate(ctx, results)
        if ctx.round < self.preliminary_rounds:  # decoders stay local until the upload round
            state.update({k: v for k, v in ctx.global_state.items() if k.startswith("extras.decoder.")})
        if ctx.round == self.preliminary_rounds:  # every client's decoder, averaged like the rest: the global D̄
            ctx.share("decoders", len(results))
        return state

    # ------------------------------------------------------------------ Stage II
    def share(self, ctx) -> None:
        """DPMS at every donor, the server's matching, and what each receiver gets — from round P's global model
        (``ctx.global_state`` at round P + 1). Recorded in the ledger; kept in the checkpoint."""
        model = ctx.global_model()
        code = model.extras["mu"].out_features
        calibrated, collapse = self.noise == "calibrated", self.mean == "scalar"
        clip = self.clip_norm if self.clip_norm is not None else math.sqrt(code)
        decoder = model.extras["decoder"]

        def accept(z):  # the donor decodes with D̄ and keeps z̃ if its classifier agrees
            return predict(model, decoder(z))

        data = [ctx.client_data(k) for k in range(ctx.num_clients)]
        roles = [
            abundant_and_scarce(np.bincount(y.cpu().numpy(), minlength=ctx.num_classes), self.abundant) for _, y in data
        ]
        abundant, scarce = [r[0] for r in roles], [r[1] for r in roles]
        pools, sizes, clipped = {}, {}, {}
        with torch.no_grad():
            for j, (x, y) in enumerate(data):
                for c in abundant[j]:
                    h = predict_features(model, x[y == c])
                    mu, g = model.extras["mu"](h), ctx.rng("dpms", j, c)
                    if calibrated:  # clipped rows, Gaussian noise σ times the mean's sensitivity 2C/N
                        mean, std = class_mean(mu, clip, collapse), self.noise_multiplier * sensitivity(clip, len(mu))
                        clipped[j, c] = float((mu.norm(dim=1) > clip).float().mean())
                    else:  # the code's: unclipped mean of reparameterised draws, σ an absolute std
                        mean, std = code_class_mean(mu, model.extras["logvar"](h), g, collapse), self.noise_multiplier
                    pools[j, c] = pool = noisy_mean_pool(mean, std, c, accept, self.quota, self.max_attempts, g)
                    sizes[j, c] = len(mu)
                    ctx.share("noisy_latent_means", len(pool.latents))
        self._uploaded = {key: pool.latents for key, pool in pools.items()}  # every kept z̃ reaches the server
        donors = match_clients(abundant, scarce, code_rule=self.send_classes == "all")
        self._received = {}
        for i, j in enumerate(donors):
            if j is None:
                classes = []
            elif self.send_classes == "all":  # the code: every abundant class of the donor
                classes = abundant[j]
            else:  # the slides: "the corresponding means" — the classes the receiver is scarce in
                classes = [c for c in scarce[i] if c in abundant[j]]
            z = [pools[j, c].latents for c in classes]
            y = [torch.full((len(p),), c, dtype=torch.long) for c, p in zip(classes, z)]
            self._received[i] = (
                torch.cat(z) if z else torch.zeros(0, code),
                torch.cat(y) if y else torch.zeros(0, dtype=torch.long),
            )
        ctx.share("class_roles_to_server", ctx.num_clients)  # side information: abundant / scarce classes
        for k in range(ctx.num_clients):  # matching done: every client deletes its decoder (only D̄ remains)
            ctx.save_client_state(k, {})
        # per client, in the round's history row: its donor (-1: none), latents it uploaded and received
        ctx.round_metrics["dpms_donor"] = [-1 if j is None else j for j in donors]
        ctx.round_metrics["dpms_uploaded"] = [
            sum(len(pools[j, c].latents) for c in abundant[j]) for j in range(ctx.num_clients)
        ]
        ctx.round_metrics["dpms_received"] = [len(self._received[i][1]) for i in range(ctx.num_clients)]
        # a few shared noisy means per class (what left the donors), for the synthetic-image figure
        examples: dict[str, list] = {}
        for (_, c), pool in sorted(pools.items(), key=lambda kv: kv[0][1]):
            have = examples.setdefault(str(c), [])
            have += [[round(v, 5) for v in z.tolist()] for z in pool.latents[: EXAMPLES - len(have)]]
        ctx.round_metrics["dpms_examples"] = examples
        sigma, delta = self.noise_multiplier, self.delta
        releases = max((p.attempts for p in pools.values()), default=0)
        ctx.guarantee("releases_per_class_max", releases)
        ctx.guarantee("delta", delta)
        if not calibrated:  # unclipped: the mean's sensitivity is unbounded, no ε holds
            ctx.guarantee("noise_std", sigma)
            ctx.guarantee("epsilon_exact", math.inf)
            return
        ctx.guarantee("noise_multiplier", sigma)
        ctx.guarantee("epsilon_classical_per_release", epsilon_classical(sigma, delta))  # the slides' formula
        ctx.guarantee("epsilon_exact_per_release", epsilon_exact(sigma, delta))
        ctx.guarantee("epsilon_exact", epsilon_exact(sigma, delta, releases))  # every draw of a class mean composes
        ctx.guarantee("clip_norm", clip)
        # the largest L2 sensitivity of a released mean, 2C / N_j^c (the noise std is σ times it)
        ctx.guarantee("sensitivity_max", max((sensitivity(clip, n) for n in sizes.values()), default=0.0))
        ctx.guarantee("clipped_fraction_max", max(clipped.values(), default=0.0))

    def training_data(self, ctx, client):
        """The receiver's data merged with D̄'s decoding of the latents it received (decoded once, kept)."""
        if client not in self._synthetic:
            z, y = self._received[client]
            decoder = ctx.global_model().extras["decoder"]
            with torch.no_grad():
                x_syn = decoder.eval()(z.to(ctx.device)) if len(z) else None
            self._synthetic[client] = (x_syn, y.to(ctx.device))
        x, y = ctx.client_data(client)
        x_syn, y_syn = self._synthetic[client]
        if x_syn is None:
            return x, y
        return torch.cat([x, x_syn.to(memory_format=ctx.memory_format)]), torch.cat([y, y_syn])

    def state_dict(self):
        return {"received": self._received}

    def load_state_dict(self, state):
        self._received = state.get("received")
        self._synthetic = {}


def predict_features(model, x, batch: int = 1000):
    """The trunk's flattened features in eval mode (Mu's input), batched."""
    model.eval()
    return torch.cat([model.features(xb).flatten(1) for xb in x.split(batch)])
