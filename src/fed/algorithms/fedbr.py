"""FedBR (Guo, Tang & Lin, ICML 2023): reduce the local learning bias with globally shared pseudo-data.

Pseudo-data x_p are FedMix-style means of groups of M local samples, shared once by every client. Locally:
    loss = CE(f(x), y)                                         the client's data
         + λ_cls · CE(f(x_p), uniform)                         balance the local classifier's outputs (component 1)
         + λ_con · ℓ_con(φ_l(x_p); φ_g(x_p), mean φ_l(x))      pull local features of x_p to the global model's,
                                                               push them from the local data's mean (component 2)
with ℓ_con the two-view contrastive loss of MOON. The paper's adversarial (max) step on a projection layer is not
implemented (docs/deviations.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fed.algorithms.fedmix import MeanSharing
from fed.losses import contrastive_loss, soft_cross_entropy


def fedbr_terms(model, global_model, x, x_p, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(classifier-balance term, feature contrastive term) for local batch x and pseudo-data x_p."""
    h_p = model.features(x_p)
    uniform = torch.full((len(x_p), model.head(h_p[:1]).shape[1]), 1.0)
    balance = soft_cross_entropy(model.head(h_p), uniform.to(h_p.device) / uniform.shape[1])
    with torch.no_grad():
        h_p_global = global_model.features(x_p).flatten(1)
    h_local_mean = model.features(x).flatten(1).mean(0, keepdim=True).expand(len(x_p), -1)
    return balance, contrastive_loss(h_p.flatten(1), h_p_global, h_local_mean, tau)


class FedBR(MeanSharing):
    name = "fedbr"

    def __init__(
        self, lam_cls: float = 1.0, lam_con: float = 1.0, tau: float = 0.5, mean_batch: int = 10, pseudo_batch: int = 32
    ):
        super().__init__(lam=0.0, mean_batch=mean_batch)
        self.lam_cls, self.lam_con, self.tau, self.pseudo_batch = lam_cls, lam_con, tau, pseudo_batch

    def local_loss(self, model, x, y, local, ctx):
        x_p, _ = self.draw(local, self.pseudo_batch)
        balance, contrast = fedbr_terms(model, ctx.global_model(), x, x_p, self.tau)
        return F.cross_entropy(model(x), y) + self.lam_cls * balance + self.lam_con * contrast
