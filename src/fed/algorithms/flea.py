"""FLea (Xia et al., KDD 2024): a buffer of shared intermediate features, feature mixup, distillation and distance
correlation, for scarce and label-skewed clients.

The model is cut at layer l (``SplitModel.features`` = θ[:l], ``head`` = θ[l:]). Algorithm 1, round t:

    2–3   the server sends θ(t) and the feature buffer F(t) to the sampled clients K(t) (no buffer in round 1)
    7     per local batch B, a feature batch B^F from F(t) (|B^F| = |B|) and β_i ~ Beta(a, a)
    8     f̃_i = β_i θ[:l](x_i) + (1 − β_i) f^F_i,   ỹ_i = β_i y_i + (1 − β_i) y^F_i                   (Eq. 2)
          L = CE(θ[l:](f̃), ỹ) + λ1 L_dis + λ2 dCor(x, θ[:l](x))                                    (Eq. 3–6)
          round 1: CE(θ(x), y) + λ2 dCor (the buffer is empty)
    13    FedAvg aggregation
    14–18 every client of K(t) extracts, with θ(t+1), the features of its shared α share of samples: they form
          F(t+1), which replaces F(t) (the buffer holds one round's features only)

L_dis (``kd``): "buffer" — KL(p_g ‖ p_l) on the buffer features, the round-start global model as teacher (the
official code, as the issue states it); "mixed" — Eq. 4 read literally, KL(p_l ‖ p_g) on the mixed features f̃.
What leaves a client: the features and labels of its shared samples, once per round it takes part, never the
samples themselves (``buffer`` holds only ``features``/``labels``/``owner``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from fed.algorithms.base import Algorithm
from fed.losses import distance_correlation, soft_cross_entropy
from fed.sharing import share_subset

RHO_SAMPLES = 512


@dataclass
class FeatureBuffer:
    """F(t): activations θ(t)[:l](x) of the shared samples of the previous round's clients, with one-hot labels."""

    features: torch.Tensor  # (n, *feature shape), no gradient
    labels: torch.Tensor  # (n, C) one-hot
    owner: torch.Tensor  # (n,) the client each row came from
    extracted_round: int  # the round whose aggregate θ(t+1) extracted them (age 1 when used in round t+1)


def feature_mixup(
    f: torch.Tensor, y: torch.Tensor, f_buf: torch.Tensor, y_buf: torch.Tensor, beta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 2: per-sample convex combinations β_i·(f_i, y_i) + (1 − β_i)·(f^F_i, y^F_i); labels as distributions."""
    b = beta.view(-1, *([1] * (f.dim() - 1)))
    return b * f + (1 - b) * f_buf, beta[:, None] * y + (1 - beta[:, None]) * y_buf


def distillation(student_logits: torch.Tensor, teacher_logits: torch.Tensor, tau: float, reverse: bool) -> torch.Tensor:
    """τ²·KL(p_teacher ‖ p_student) (``reverse=False``), or τ²·KL(p_student ‖ p_teacher) (Eq. 4), batch mean."""
    log_s, log_t = F.log_softmax(student_logits / tau, 1), F.log_softmax(teacher_logits / tau, 1)
    p, log_p, log_q = (log_s.exp(), log_s, log_t) if reverse else (log_t.exp(), log_t, log_s)
    return tau**2 * (p * (log_p - log_q)).sum(1).mean()


class FLea(Algorithm):
    name = "flea"

    def __init__(
        self,
        share_fraction: float = 0.1,
        beta_a: float = 2.0,
        lambda_dis: float = 1.0,
        lambda_dcor: float = 3.0,
        tau: float = 1.0,
        kd: str = "buffer",
        dcor: str = "root",
    ):
        if not 0 < share_fraction <= 1:
            raise ValueError(f"flea: share_fraction must be in (0, 1], got {share_fraction}")
        if beta_a <= 0 or tau <= 0 or lambda_dis < 0 or lambda_dcor < 0:
            raise ValueError("flea: beta_a and tau must be > 0, lambda_dis and lambda_dcor >= 0")
        if kd not in ("buffer", "mixed"):
            raise ValueError(f"flea: kd must be 'buffer' or 'mixed', got {kd!r}")
        if dcor not in ("root", "squared"):
            raise ValueError(f"flea: dcor must be 'root' or 'squared', got {dcor!r}")
        self.share_fraction, self.beta_a, self.tau, self.kd, self.dcor = share_fraction, beta_a, tau, kd, dcor
        self.lambda_dis, self.lambda_dcor = lambda_dis, lambda_dcor
        self._sources: list[int] = []  # K(t−1): whose features form this round's buffer
        self._exchanged: torch.Tensor | None = None  # ξ(t): pairs of clients that have exchanged features
        self._buffer: FeatureBuffer | None = None

    # ------------------------------------------------------------------ what each client shares
    def shared_indices(self, ctx, client: int) -> torch.Tensor:
        """The α share of a client's local training samples whose features it contributes, fixed for the run."""
        n = len(ctx.client_data(client)[1])
        return share_subset(n, self.share_fraction, ctx.rng("flea_share", client))

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
            # ρ of Fig. 9(b): dCor between the shared samples and their features, over the buffer (first 512 rows:
            # the V-statistic is biased upward on a handful of samples, so not per client)
            n = min(len(buf.owner), RHO_SAMPLES)
            rho = distance_correlation(torch.cat(inputs)[:n], buf.features[:n], squared=self.dcor == "squared")
        ctx.share("features", len(buf.owner))
        ctx.round_metrics.update(
            flea_buffer_size=len(buf.owner),
            flea_dcor_shared=float(rho),
            flea_buffer_classes=buf.labels.sum(0).round().int().tolist(),  # Fig. 7: the classes F(t) holds
        )
        return buf

    # ------------------------------------------------------------------ round hooks
    def client_update(self, ctx, client):
        if self._buffer is None or self._buffer.extracted_round != ctx.round - 1:
            self._buffer = self.build_buffer(ctx)
        ctx.model.load_state_dict(ctx.global_state)
        rng = ctx.np_rng("flea_mix", ctx.round, client)
        return self.train_locally(ctx, client, *ctx.client_data(client), extra={"rng": rng})

    def local_loss(self, model, x, y, local, ctx):
        f = model.features(x)
        rho = distance_correlation(x, f, squared=self.dcor == "squared") if len(y) > 1 else f.new_zeros(())
        buf = self._buffer
        if buf is None:  # round 1: Algorithm 1 skips the augmentation
            return F.cross_entropy(model.head(f), y) + self.lambda_dcor * rho
        rng: np.random.Generator = local.extra["rng"]
        pick = torch.as_tensor(rng.integers(len(buf.owner), size=len(y)), device=buf.features.device)
        beta = torch.as_tensor(rng.beta(self.beta_a, self.beta_a, size=len(y)), dtype=f.dtype, device=f.device)
        f_buf = buf.features[pick].to(memory_format=torch.contiguous_format)
        f_mix, y_mix = feature_mixup(f, F.one_hot(y, ctx.num_classes).to(f.dtype), f_buf, buf.labels[pick], beta)
        if "flea_batch" not in ctx.round_metrics:  # the round's first augmented batch, for Figs. 7 and 8
            ctx.round_metrics["flea_batch"] = self.batch_record(ctx, local.client, y_mix, beta)
        loss = soft_cross_entropy(model.head(f_mix), y_mix) + self.lambda_dcor * rho
        if self.lambda_dis:
            teacher = ctx.global_model()
            kd_in = f_buf if self.kd == "buffer" else f_mix
            with torch.set_grad_enabled(self.kd == "mixed"):  # Eq. 4's f̃ carries the local extractor's gradient
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

    def state_dict(self):
        return {"sources": list(self._sources), "exchanged": self._exchanged}

    def load_state_dict(self, state):
        self._sources, self._exchanged, self._buffer = list(state["sources"]), state["exchanged"], None
