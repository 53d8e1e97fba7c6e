"""FedDPMS (Chen & Vikalo, FL-CV workshop 2023, slides): FL aided by differentially private synthetic data.

Stage I, preliminary training (rounds 1..P):
  each client trains a VAE — encoder E, classifier, Mu/LogVar heads, decoder D — on
      L = CE(ŷ, y) + λ (KLD(q ‖ N(0, I)) + MSE(x̂, x));
  E, the classifier and Mu/LogVar are averaged every round; each client keeps its own decoder;
  at round P every client uploads its decoder and the server averages them into the global decoder D̄.
  Stage I is its own DAG node (the ``vae_prelim`` stage), shared by every cell with the same λ and P.
Stage II, DPMS (once, at round P + 1, with round P's global model — the E and classifier every client holds):
  donor i, for each abundant class c: z_i^c = mean of clip_C(Mu(E(x))) over its N_i^c samples; repeatedly
      z̃ = z_i^c + N(0, (σ·2C/N_i^c)² I), keep z̃ if classifier(D̄(z̃)) = c, until α are kept (``fed.dpms``);
  server: knows every client's abundant / scarce classes and matches each receiver to the donor that is abundant
      in most of its scarce classes; forwards that donor's kept z̃ of those classes (latents, never data or D_i);
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
    epsilon_classical,
    epsilon_exact,
    match_clients,
    noisy_mean_pool,
    sensitivity,
)
from fed.models.vae import vae_modules
from fed.stages import Stage
from fed.training import predict

EXAMPLES = 8  # noisy means per class kept in the run's history for the figures


def vae_loss(model, x, y, vae_weight: float):
    """Stage I's objective: CE + λ (KLD + MSE), KLD and MSE summed over latent dimensions / pixels and averaged
    over the batch (the code's per-sample sums; the slides do not say)."""
    h = model.features(x).flatten(1)
    mu, logvar = model.extras["mu"](h), model.extras["logvar"](h)
    # reparameterisation, from torch's per-client seeded CPU stream: the same draws on a GPU as on the CPU
    z = mu + torch.exp(logvar / 2) * torch.randn(mu.shape, dtype=mu.dtype).to(mu.device)
    x_hat = model.extras["decoder"](z)
    kld = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1).mean()
    mse = (x_hat - x).pow(2).flatten(1).sum(1).mean()
    return F.cross_entropy(model.head(h), y) + vae_weight * (kld + mse)


class FedDPMS(Algorithm):
    name = "feddpms"

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
    ):
        if preliminary_rounds < 1:
            raise ValueError(f"FedDPMS: preliminary_rounds (P) must be >= 1, got {preliminary_rounds}")
        if not noise_multiplier > 0 or not 0 < delta < 1:
            raise ValueError(f"FedDPMS: need noise_multiplier > 0 and 0 < delta < 1, got {noise_multiplier}, {delta}")
        if mean not in ("vector", "scalar"):
            raise ValueError(f"FedDPMS: mean must be 'vector' or 'scalar' (the code's collapse), got {mean!r}")
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"FedDPMS: clip_norm must be > 0 (or null: √code_length), got {clip_norm}")
        self.preliminary_rounds, self.vae_weight = preliminary_rounds, vae_weight
        self.noise_multiplier, self.delta, self.clip_norm = noise_multiplier, delta, clip_norm
        self.quota, self.max_attempts, self.abundant, self.mean = quota, max_attempts, abundant, mean
        self._received: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None  # receiver -> (z̃, labels)
        self._synthetic: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # receiver -> decoded (x, y)

    # ------------------------------------------------------------------ Stage I
    def extra_modules(self, model, input_shape):
        return vae_modules(model, input_shape)

    def stages(self):
        return {"warm": Stage.of("vae_prelim", rounds=self.preliminary_rounds, vae_weight=self.vae_weight)}

    def preliminary(self, ctx) -> bool:
        return ctx.round <= self.preliminary_rounds

    def select_clients(self, ctx):
        # round P is the upload round: every client sends its decoder
        return list(range(ctx.num_clients)) if ctx.round == self.preliminary_rounds else ctx.sample_clients()

    def local_loss(self, model, x, y, local, ctx):
        return vae_loss(model, x, y, self.vae_weight) if self.preliminary(ctx) else F.cross_entropy(model(x), y)

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
        if ctx.round == self.preliminary_rounds:  # the mean of every client's decoder: the global decoder D̄
            ctx.share("decoders", len(results))
        return state

    # ------------------------------------------------------------------ Stage II
    def share(self, ctx) -> None:
        """DPMS at every donor, the server's matching, and what each receiver gets — from round P's global model
        (``ctx.global_state`` at round P + 1). Recorded in the ledger; kept in the checkpoint."""
        model = ctx.global_model()
        code = model.extras["mu"].out_features
        clip = self.clip_norm if self.clip_norm is not None else math.sqrt(code)
        decoder = model.extras["decoder"]

        def accept(z):  # the donor decodes with D̄ and keeps z̃ if its classifier agrees
            return predict(model, decoder(z))

        data = [ctx.client_data(k) for k in range(ctx.num_clients)]
        roles = [
            abundant_and_scarce(np.bincount(y.cpu().numpy(), minlength=ctx.num_classes), self.abundant) for _, y in data
        ]
        abundant, scarce = [r[0] for r in roles], [r[1] for r in roles]
        pools = {}
        with torch.no_grad():
            for j, (x, y) in enumerate(data):
                for c in abundant[j]:
                    z = model.extras["mu"](predict_features(model, x[y == c]))
                    pools[j, c] = pool = noisy_mean_pool(
                        z,
                        c,
                        accept,
                        clip,
                        self.noise_multiplier,
                        self.quota,
                        self.max_attempts,
                        ctx.rng("dpms", j, c),
                        collapse=self.mean == "scalar",
                    )
                    ctx.share("noisy_latent_means", len(pool.latents))
        donors = match_clients(abundant, scarce)
        self._received = {}
        for i, j in enumerate(donors):
            classes = [c for c in scarce[i] if j is not None and c in abundant[j]]
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
        ctx.guarantee("noise_multiplier", sigma)
        ctx.guarantee("delta", delta)
        ctx.guarantee("epsilon_classical_per_release", epsilon_classical(sigma, delta))  # the slides' formula
        ctx.guarantee("epsilon_exact_per_release", epsilon_exact(sigma, delta))
        releases = max((p.attempts for p in pools.values()), default=0)
        ctx.guarantee("releases_per_class_max", releases)
        ctx.guarantee("epsilon_exact", epsilon_exact(sigma, delta, releases))  # every draw of a class mean composes
        ctx.guarantee("clip_norm", clip)
        # the largest L2 sensitivity of a released mean, 2C / N_i^c (the noise std is σ times it)
        ctx.guarantee("sensitivity_max", max((sensitivity(clip, p.num_samples) for p in pools.values()), default=0.0))
        ctx.guarantee("clipped_fraction_max", max((p.clipped_fraction for p in pools.values()), default=0.0))

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
