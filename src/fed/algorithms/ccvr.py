"""CCVR (Luo et al., NeurIPS 2021): classifier calibration with virtual representations, after federated training.

FedAvg until the calibration round; then the server re-trains the last linear layer (``classify``) on penultimate
representations z = ``embed``(x) of the global model, with the rest of the model frozen. Where they come from:

- ``source: gaussian`` (the paper): each client sends, per class c, the count N_c,k, mean μ_c,k and covariance
  Σ_c,k of its z. The server combines them into the global Gaussian of each class
      μ_c = Σ_k N_c,k μ_c,k / N_c
      Σ_c = Σ_k (N_c,k − 1)/(N_c − 1) Σ_c,k + Σ_k N_c,k/(N_c − 1) μ_c,k μ_c,kᵀ − N_c/(N_c − 1) μ_c μ_cᵀ
  and draws M_c virtual representations from N(μ_c, Σ_c).
- ``source: features`` (FLea's App. C: "the same amount of features as our method ... the features instead of
  distributions"): each client sends the z of ⌊``feature_fraction``·|D_k|⌋ random samples (FLea's count), with
  their labels, and the server fits the layer on them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fed.algorithms.base import Algorithm
from fed.training import SGDSettings, local_sgd


def class_statistics(
    h: torch.Tensor, y: torch.Tensor, num_classes: int
) -> dict[int, tuple[int, torch.Tensor, torch.Tensor]]:
    """Per present class: (count, mean, unbiased covariance) of the rows of h."""
    out = {}
    for c in y.unique().tolist():
        hc = h[y == c].double()
        cov = torch.cov(hc.T) if len(hc) > 1 else torch.zeros(h.shape[1], h.shape[1], dtype=torch.float64)
        out[c] = (len(hc), hc.mean(0), cov.reshape(h.shape[1], h.shape[1]))
    return out


def combine_statistics(parts: list[tuple[int, torch.Tensor, torch.Tensor]]) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Pooled (count, mean, unbiased covariance) from per-client ones (exact, no raw features needed)."""
    n = sum(p[0] for p in parts)
    mean = sum(k * m for k, m, _ in parts) / n
    if n < 2:
        return n, mean, torch.zeros_like(parts[0][2])
    cov = sum((k - 1) / (n - 1) * s + k / (n - 1) * torch.outer(m, m) for k, m, s in parts)
    return n, mean, cov - n / (n - 1) * torch.outer(mean, mean)


class CCVR(Algorithm):
    name = "ccvr"
    vectorise = True

    def __init__(
        self,
        virtual_per_class: int = 100,
        epochs: int = 10,
        lr: float = 0.01,
        calibrate_round: int = 0,
        source: str = "gaussian",
        feature_fraction: float = 0.1,
    ):
        if source not in ("gaussian", "features"):
            raise ValueError(
                f"CCVR: source must be 'gaussian' (the paper) or 'features' (FLea's App. C), got {source!r}"
            )
        if not 0 < feature_fraction <= 1:
            raise ValueError(f"CCVR: feature_fraction must be in (0, 1], got {feature_fraction}")
        self.virtual_per_class, self.epochs, self.lr = virtual_per_class, epochs, lr
        self.calibrate_round = calibrate_round  # 0: the last round
        self.source, self.feature_fraction = source, feature_fraction

    def server_update(self, ctx, model, results):
        if ctx.round != (self.calibrate_round or ctx.cfg.rounds):
            return
        model.eval()
        with torch.no_grad():
            z, y = self.virtual(ctx, model) if self.source == "gaussian" else self.shared_features(ctx, model)
        layer = model.classifier_module()
        for p in model.parameters():
            p.requires_grad_(False)
        for p in layer.parameters():
            p.requires_grad_(True)
        ctx.round_metrics["ccvr_loss"] = local_sgd(
            layer,
            z.to(ctx.device),
            y.to(ctx.device),
            lambda zb, yb: F.cross_entropy(model.classify(zb), yb),
            ctx.rng("calibrate", ctx.round),
            SGDSettings(self.lr, batch_size=ctx.cfg.batch_size, epochs=self.epochs),
        ).loss
        for p in model.parameters():
            p.requires_grad_(True)

    @staticmethod
    def _embed(model, x):
        return torch.cat([model.embed(xb) for xb in x.split(500)])

    def virtual(self, ctx, model):
        """M_c virtual representations per class from the clients' pooled Gaussians."""
        pooled: dict[int, tuple] = {}  # folded client by client: one d×d covariance per class in memory, not per client
        sent = 0
        for k in range(ctx.num_clients):
            x, y = ctx.client_data(k)
            for c, stats in class_statistics(self._embed(model, x), y, ctx.num_classes).items():
                pooled[c] = combine_statistics([pooled[c], stats]) if c in pooled else stats
                sent += 1
        ctx.share("class_feature_statistics", sent)
        gen = ctx.rng("virtual", ctx.round)
        dtype = next(model.parameters()).dtype
        zs, ys = [], []
        for c, (_, mean, cov) in sorted(pooled.items()):
            evals, evecs = torch.linalg.eigh(cov)  # cov^½ (covariances from few samples are singular)
            root = evecs * evals.clamp_min(0).sqrt()
            noise = torch.randn(self.virtual_per_class, len(mean), generator=gen, dtype=mean.dtype).to(mean.device)
            zs.append((mean + noise @ root.T).to(dtype))  # the statistics are float64
            ys.append(torch.full((self.virtual_per_class,), c))
        return torch.cat(zs), torch.cat(ys)

    def shared_features(self, ctx, model):
        """The representations of a random ``feature_fraction`` of every client's samples, with their labels."""
        zs, ys = [], []
        for k in range(ctx.num_clients):
            x, y = ctx.client_data(k)
            n = math.floor(self.feature_fraction * len(y))  # FLea's ⌊α|D_k|⌋: "the same amount of features"
            pick = torch.randperm(len(y), generator=ctx.rng("ccvr-share", k))[:n].to(y.device)
            zs.append(self._embed(model, x[pick]))
            ys.append(y[pick])
        ctx.share("features", sum(len(v) for v in ys))
        if not sum(len(v) for v in ys):
            raise ValueError(
                f"CCVR: feature_fraction {self.feature_fraction} shares no representation (every client has fewer"
                f" than {math.ceil(1 / self.feature_fraction)} samples)"
            )
        return torch.cat(zs), torch.cat(ys)
