"""FLea (Xia et al., KDD 2024): a buffer of shared intermediate features, feature mixup, distillation and distance
correlation, for scarce and label-skewed clients.

The model is cut at layer l (``SplitModel.features`` = θ[:l], ``head`` = θ[l:]). Algorithm 1, round t:

    2–3   the server sends θ(t) and the feature buffer F(t) to the sampled clients K(t) (no buffer in round 1)
    7     per local batch B, the next |B| rows B^F of shuffled passes over F(t), and β_i ~ Beta(a, a)
    8     f̃_i = β_i θ_k[:l](x_i) + (1 − β_i) f^F_i,   ỹ_i = β_i y_i + (1 − β_i) y^F_i                 (Eq. 2)
          L = L_clf + λ1 L_dis + λ2 L_dec                                                            (Eq. 6)
            L_clf = −(1/|B|) Σ_i Σ_c ỹ_i[c] log p^l_i[c],  p^l = softmax(θ_k[l:](f̃))                (Eq. 3)
            L_dis = (1/|B|) Σ_i KL(p^l_i ‖ p^g_i),  p^g = softmax(θ(t)[l:](f̃))                      (Eq. 4)
            L_dec = ν²(x, f)/√(ν²(x, x) ν²(f, f)) = R²(x, θ_k[:l](x)) on the local batch             (Eq. 5, 8)
          round 1: the same without augmentation (f̃ = f, ỹ = y)
    13    FedAvg aggregation
    14–18 every client of K(t) extracts, with θ(t+1) in eval mode, the features of its ⌊α|D_k|⌋ shared samples (drawn
          once, without replacement): they form F(t+1), which replaces F(t) (one round's features only)

The authors' code (XTxiatong/FLea, ``train_decor_feature``, loss ``MCE_DeC_KL``) differs; each difference is an
option: ``kd: buffer`` (τ²·KL(p_g ‖ p_l) on the buffer features only), ``dcor: root`` (R, not R²),
``lambda_ce: 1`` (a CE on the local batch through the whole model), ``dcor_schedule: code`` (λ2 = 3 − 0.1(t − 1)
until round 20, then 1, scaled by λ2/3), ``warmup: code`` (round 1: 3E epochs of CE + 0.5·λ1·KL(p_g ‖ p_l) on
θ(x) + λ2·dCor), ``feature_batches: loader`` (B^F from a shuffled loader over F(t); its last, shorter batch
truncates the mix), ``share_replace: true`` (shared samples drawn with replacement). What leaves a client: the
features and labels of its shared samples, once per round it takes part, never the samples themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from fed.algorithms.base import Algorithm, ClientResult, LocalContext
from fed.losses import distance_correlation, one_hot, soft_cross_entropy
from fed.training import state_copy

RHO_SAMPLES = 512


@dataclass
class FeatureBuffer:
    """F(t): activations θ(t)[:l](x) of the shared samples of the previous round's clients, with one-hot labels."""

    features: torch.Tensor  # (n, *feature shape), no gradient
    labels: torch.Tensor  # (n, C) one-hot
    owner: torch.Tensor  # (n,) the client each row came from
    extracted_round: int  # the round whose aggregate θ(t+1) extracted them (age 1 when used in round t+1)


class FeatureBatches:
    """The rows of F(t) each local batch mixes with, from a client's mixing stream: consecutive passes over the
    buffer, each a fresh permutation (``rng.permutation``). ``loader=False`` (Sec. 3.3: F(t) "divided into
    equal-sized batches", |B^F| = |B|): a batch may run across two passes. ``loader=True`` (the code's shuffled
    ``DataLoader`` of ``batch_size`` cycled by ``get_next_feature_batch``): each local batch takes the next loader
    batch, the last of a pass shorter."""

    def __init__(self, n: int, rng: np.random.Generator, loader: bool, batch_size: int):
        self.n, self.rng, self.loader, self.batch_size = n, rng, loader, batch_size
        self.order = np.empty(0, dtype=np.int64)

    def take(self, size: int) -> np.ndarray:
        if self.loader:
            if not len(self.order):
                self.order = self.rng.permutation(self.n)
            out, self.order = self.order[: self.batch_size], self.order[self.batch_size :]
            return out
        while len(self.order) < size:
            self.order = np.concatenate([self.order, self.rng.permutation(self.n)])
        out, self.order = self.order[:size], self.order[size:]
        return out


def feature_mixup(
    f: torch.Tensor, y: torch.Tensor, f_buf: torch.Tensor, y_buf: torch.Tensor, beta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 2: per-sample convex combinations β_i·(f_i, y_i) + (1 − β_i)·(f^F_i, y^F_i); labels as distributions."""
    b = beta.view(-1, *([1] * (f.dim() - 1)))
    return b * f + (1 - b) * f_buf, label_mixup(y, y_buf, beta)


def label_mixup(y: torch.Tensor, y_buf: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """ỹ_i = β_i·y_i + (1 − β_i)·y^F_i (label distributions)."""
    return beta[:, None] * y + (1 - beta[:, None]) * y_buf


def distillation(student_logits: torch.Tensor, teacher_logits: torch.Tensor, tau: float, reverse: bool) -> torch.Tensor:
    """τ²·KL(p_teacher ‖ p_student) (``reverse=False``, the code), or τ²·KL(p_student ‖ p_teacher) (Eq. 4), batch
    mean; p = softmax(logits/τ)."""
    log_s, log_t = F.log_softmax(student_logits / tau, 1), F.log_softmax(teacher_logits / tau, 1)
    p, log_p, log_q = (log_s.exp(), log_s, log_t) if reverse else (log_t.exp(), log_t, log_s)
    return tau**2 * (p * (log_p - log_q)).sum(1).mean()


def batch_dcor(model: torch.nn.Module, x: torch.Tensor, batch_size: int) -> float | None:
    """R(x, θ_k[:l](x)) per local batch, averaged: what FLea's code prints as ρ (``dist_corr`` on each training batch,
    the local model in training mode, the mean of the last local epoch; myuser.py l. 1514, 1540). Here after the local
    update, on the client's data in consecutive batches of ``batch_size`` (≥ 2 samples), so the model is the last
    step's rather than each step's. Recorded only: BatchNorm's statistics, the model's mode and the random state are
    left as they were; it costs one forward pass over the client's data a round. None when no batch has two samples."""
    batches = [b for b in x.split(batch_size) if len(b) > 1]
    if not batches:
        return None
    buffers, training = {k: v.clone() for k, v in model.named_buffers()}, model.training
    with torch.no_grad(), torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        model.train()
        r = [float(distance_correlation(b, model.features(b))) for b in batches]
    for k, v in model.named_buffers():
        v.copy_(buffers[k])
    model.train(training)
    return sum(r) / len(r)


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"flea: {name} must be one of {allowed}, got {value!r}")
    return value


class FLea(Algorithm):
    name = "flea"
    vectorise = True

    def __init__(
        self,
        share_fraction: float = 0.1,
        beta_a: float = 2.0,
        lambda_dis: float = 1.0,
        lambda_dcor: float = 3.0,
        tau: float = 1.0,
        kd: str = "mixed",
        dcor: str = "squared",
        lambda_ce: float = 0.0,
        dcor_schedule: str = "constant",
        warmup: str = "paper",
        feature_batches: str = "equal",
        share_replace: bool = False,
    ):
        if not 0 < share_fraction <= 1:
            raise ValueError(f"flea: share_fraction must be in (0, 1], got {share_fraction}")
        if beta_a <= 0 or tau <= 0 or min(lambda_dis, lambda_dcor, lambda_ce) < 0:
            raise ValueError("flea: beta_a and tau must be > 0, lambda_dis, lambda_dcor and lambda_ce >= 0")
        self.share_fraction, self.beta_a, self.tau = share_fraction, beta_a, tau
        self.lambda_dis, self.lambda_dcor, self.lambda_ce = lambda_dis, lambda_dcor, lambda_ce
        self.kd = _choice("kd", kd, ("mixed", "buffer"))
        self.dcor = _choice("dcor", dcor, ("squared", "root"))
        self.dcor_schedule = _choice("dcor_schedule", dcor_schedule, ("constant", "code"))
        self.warmup = _choice("warmup", warmup, ("paper", "code"))
        self.feature_batches = _choice("feature_batches", feature_batches, ("equal", "loader"))
        self.share_replace = bool(share_replace)
        self._sources: list[int] = []  # K(t−1): whose features form this round's buffer
        self._exchanged: torch.Tensor | None = None  # ξ(t): pairs of clients that have exchanged features
        self._buffer: FeatureBuffer | None = None
        self._buffer_round = 0  # the round self._buffer was built for

    # ------------------------------------------------------------------ what each client shares
    def shared_indices(self, ctx, client: int) -> torch.Tensor:
        """The ⌊α|D_k|⌋ local training samples (the code's ``int``) whose features a client contributes, drawn once
        for the run: without replacement ("an α fraction of its local data"), or with it (``share_replace``)."""
        n = len(ctx.client_data(client)[1])
        k, g = math.floor(self.share_fraction * n), ctx.rng("flea_share", client)
        return torch.randint(n, (k,), generator=g) if self.share_replace else torch.randperm(n, generator=g)[:k]

    def build_buffer(self, ctx) -> FeatureBuffer | None:
        """F(t) from the clients of round t − 1, extracted by θ(t) (the round-start global model, in eval mode)."""
        if not self._sources:
            return None
        model, inputs, feats, labels, owner = ctx.global_model(), [], [], [], []
        with torch.no_grad():
            for k in self._sources:
                x, y = ctx.client_data(k)
                idx = self.shared_indices(ctx, k).to(y.device)
                inputs.append(x[idx])
                feats.append(model.features(x[idx]))
                labels.append(F.one_hot(y[idx], ctx.num_classes).to(feats[-1].dtype))
                owner.append(torch.full((len(idx),), k, device=y.device))
            buf = FeatureBuffer(torch.cat(feats), torch.cat(labels), torch.cat(owner), ctx.round - 1)
            ctx.share("features", len(buf.owner))
            if not len(buf.owner):  # every source client had fewer than 1/α samples
                return None
            # ρ of Fig. 9(b) (ρ = L_dec): between the shared samples and their features, over the buffer (first 512
            # rows: the V-statistic is biased upward on a handful of samples, so not per client)
            n = min(len(buf.owner), RHO_SAMPLES)
            rho = distance_correlation(torch.cat(inputs)[:n], buf.features[:n], squared=self.dcor == "squared")
        ctx.round_metrics.update(
            flea_buffer_size=len(buf.owner),
            flea_dcor_shared=float(rho),
            flea_buffer_classes=buf.labels.sum(0).round().int().tolist(),  # Fig. 7: the classes F(t) holds
        )
        return buf

    def lambda2(self, t: int) -> float:
        """λ2 in round t: constant (Eq. 6), or the code's α3 = 3 − 0.1·(t − 1) for t ≤ 20 then 1, scaled by λ2/3."""
        if self.dcor_schedule == "constant":
            return self.lambda_dcor
        return self.lambda_dcor * ((1 - (t - 1) / 30) if t <= 20 else 1 / 3)

    # ------------------------------------------------------------------ round hooks
    def client_update(self, ctx, client):
        if self._buffer_round != ctx.round:
            self._buffer, self._buffer_round = self.build_buffer(ctx), ctx.round
        model, (x, y) = ctx.model, ctx.client_data(client)
        model.load_state_dict(ctx.global_state)
        rng = ctx.np_rng("flea_mix", ctx.round, client)
        streams = {"rng": rng}
        if self._buffer is not None:
            streams["batches"] = FeatureBatches(
                len(self._buffer.owner), rng, self.feature_batches == "loader", ctx.cfg.batch_size
            )
        local = LocalContext(client, [], streams=streams)
        epochs = 3 * ctx.cfg.local_epochs if ctx.round == 1 and self.warmup == "code" else None
        loss = self.objective(model, local, ctx)
        stats = ctx.train(model, x, y, loss, ctx.rng("shuffle", ctx.round, client), epochs, objective=(self, local))
        state = state_copy(model)
        dcor = batch_dcor(model, x, ctx.cfg.batch_size)
        return ClientResult(client, state, len(y), stats.loss, stats.steps, extra={"dcor_batch": dcor})

    def step_draws(self, model, x, y, local, ctx):
        """The rows of F(t) this batch mixes with and their β_i, from the client's mixing stream."""
        buf = self._buffer
        if buf is None:
            return {}
        pick = local.streams["batches"].take(len(y))
        m = min(len(y), len(pick))  # < |B| only for the code's loader: its last batch of a pass is shorter
        beta = torch.as_tensor(local.streams["rng"].beta(self.beta_a, self.beta_a, size=m), dtype=x.dtype)
        pick = torch.as_tensor(pick[:m], device=buf.features.device)
        if "flea_batch" not in ctx.round_metrics:  # the round's first augmented batch, for Figs. 7 and 8
            y_mix = label_mixup(F.one_hot(y[:m], ctx.num_classes).to(x.dtype), buf.labels[pick], beta.to(y.device))
            ctx.round_metrics["flea_batch"] = self.batch_record(ctx, local.client, y_mix, beta)
        return {"pick": pick, "beta": beta.to(x.device)}

    def local_loss(self, model, x, y, local, ctx):
        f = model.features(x)
        rho = distance_correlation(x, f, squared=self.dcor == "squared") if len(y) > 1 else f.new_zeros(())
        loss = self.lambda2(ctx.round) * rho
        buf, teacher = self._buffer, ctx.global_model()
        if buf is None:  # round 1 (Algorithm 1 skips the augmentation) or an empty buffer
            logits = model.head(f)
            loss = loss + F.cross_entropy(logits, y)
            if ctx.round == 1 and self.warmup == "code":  # CE + 0.5·λ1·τ²KL(p_g ‖ p_l) on θ(x) + λ2·dCor
                with torch.no_grad():
                    teacher_logits = teacher(x)
                return loss + 0.5 * self.lambda_dis * distillation(logits, teacher_logits, self.tau, reverse=False)
            if self.lambda_dis and self.kd == "mixed":  # Eq. 4 with f̃ = f
                loss = loss + self.lambda_dis * distillation(logits, teacher.head(f), self.tau, reverse=True)
            return loss
        pick, beta = local.draws["pick"], local.draws["beta"].to(f.dtype)
        m = len(beta)
        f_buf = buf.features[pick].to(memory_format=torch.contiguous_format)
        y_loc = one_hot(y[:m], ctx.num_classes, f.dtype)
        f_mix, y_mix = feature_mixup(f[:m], y_loc, f_buf, buf.labels[pick], beta)
        loss = loss + soft_cross_entropy(model.head(f_mix), y_mix)
        if self.lambda_ce:
            loss = loss + self.lambda_ce * F.cross_entropy(model.head(f), y)
        if self.lambda_dis:
            kd_in = f_buf if self.kd == "buffer" else f_mix  # Eq. 4's f̃ carries the local extractor's gradient
            with torch.set_grad_enabled(self.kd == "mixed"):
                teacher_logits = teacher.head(kd_in)
            kd = distillation(model.head(kd_in), teacher_logits, self.tau, reverse=self.kd == "mixed")
            loss = loss + self.lambda_dis * kd
        return loss

    @staticmethod
    def batch_record(ctx, client: int, y_mix: torch.Tensor, beta: torch.Tensor) -> dict:
        """One augmented batch B̃: its client, that client's class counts in D_k, the class mass of the mixed
        labels ỹ (Fig. 7) and the β_i drawn (Fig. 8). Recorded only: no random draw, no effect on training."""
        local = torch.bincount(ctx.client_data(client)[1], minlength=ctx.num_classes)
        return {
            "client": client,
            "local_classes": local.tolist(),
            "mixed_classes": [round(v, 4) for v in y_mix.detach().sum(0).tolist()],
            "beta": [round(v, 4) for v in beta.tolist()],
        }

    def server_update(self, ctx, model, results):
        """Lines 14–18: this round's clients will extract F(t+1) with θ(t+1); ξ records who exchanged with whom."""
        receivers = [r.client for r in results]
        if self._exchanged is None:
            self._exchanged = torch.zeros(ctx.num_clients, ctx.num_clients, dtype=torch.bool)
        if self._sources:
            src, dst = torch.tensor(self._sources), torch.tensor(receivers)
            self._exchanged[src[:, None], dst[None, :]] = True
            self._exchanged[dst[:, None], src[None, :]] = True
        self._sources = receivers
        ctx.round_metrics["flea_exposure"] = float(self._exchanged.float().mean())  # ε(t) = Σξ / |K|²
        measured = [r.extra["dcor_batch"] for r in results if r.extra.get("dcor_batch") is not None]
        if measured:  # the authors' printed ρ (R per local batch), read beside Fig. 9(b): mean over the round's clients
            ctx.round_metrics["flea_dcor_batch"] = sum(measured) / len(measured)

    def state_dict(self):
        return {"sources": list(self._sources), "exchanged": self._exchanged}

    def load_state_dict(self, state):
        self._sources, self._exchanged, self._buffer = list(state["sources"]), state["exchanged"], None
        self._buffer_round = 0
