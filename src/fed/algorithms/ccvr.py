"""CCVR (Luo et al., NeurIPS 2021): classifier calibration with virtual representations, after federated training.

At the calibration round each client sends, per class c, the count N_c,k, mean μ_c,k and covariance Σ_c,k of the
global model's features on its data. The server combines them into the global Gaussian of each class
    μ_c = Σ_k N_c,k μ_c,k / N_c
    Σ_c = Σ_k (N_c,k − 1)/(N_c − 1) Σ_c,k + Σ_k N_c,k/(N_c − 1) μ_c,k μ_c,kᵀ − N_c/(N_c − 1) μ_c μ_cᵀ
draws M_c virtual features from N(μ_c, Σ_c) and re-trains the classifier head on them (FedAvg before that).
"""

from __future__ import annotations

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

    def __init__(self, virtual_per_class: int = 100, epochs: int = 10, lr: float = 0.01, calibrate_round: int = 0):
        self.virtual_per_class, self.epochs, self.lr = virtual_per_class, epochs, lr
        self.calibrate_round = calibrate_round  # 0: the last round

    def server_update(self, ctx, model, results):
        if ctx.round != (self.calibrate_round or ctx.cfg.rounds):
            return
        model.eval()
        per_class: dict[int, list] = {}
        with torch.no_grad():
            shape = model.features(torch.zeros(1, *ctx.input_shape, device=ctx.device)).shape[1:]  # a map at a mid cut
            for k in range(ctx.num_clients):
                x, y = ctx.client_data(k)
                h = torch.cat([model.features(xb).flatten(1) for xb in x.split(500)])
                for c, stats in class_statistics(h, y, ctx.num_classes).items():
                    per_class.setdefault(c, []).append(stats)
        ctx.share("class_feature_statistics", sum(len(v) for v in per_class.values()))
        gen = ctx.rng("virtual", ctx.round)
        hs, ys = [], []
        for c, parts in sorted(per_class.items()):
            n, mean, cov = combine_statistics(parts)
            evals, evecs = torch.linalg.eigh(cov)  # cov^½ (covariances from few samples are singular)
            root = evecs * evals.clamp_min(0).sqrt()
            z = torch.randn(self.virtual_per_class, len(mean), generator=gen, dtype=mean.dtype)
            hs.append((mean + z @ root.T).float())
            ys.append(torch.full((self.virtual_per_class,), c))
        h, y = torch.cat(hs).to(ctx.device), torch.cat(ys).to(ctx.device)
        head = model.head_module()
        for p in model.parameters():
            p.requires_grad_(False)
        for p in head.parameters():
            p.requires_grad_(True)
        ctx.round_metrics["ccvr_loss"] = local_sgd(
            head,
            h,
            y,
            lambda hb, yb: F.cross_entropy(model.head(hb.view(-1, *shape)), yb),
            ctx.rng("calibrate", ctx.round),
            SGDSettings(self.lr, batch_size=ctx.cfg.batch_size, epochs=self.epochs),
        ).loss
        for p in model.parameters():
            p.requires_grad_(True)
