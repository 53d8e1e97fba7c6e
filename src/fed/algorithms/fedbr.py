"""FedBR (Guo, Tang & Lin, ICML 2023): reduce the local learning bias with globally shared pseudo-data.

Pseudo-data x_p are FedMix-style means of groups of M local samples, shared once by every client. Each local step
is a min-max over a projection P of the features (``model.extras["projection"]``, a 3-layer MLP d → w → w → w):

    ℓ_con(P) = ℓ_MOON( P(φ_l(x_p)); P(φ_g(x_p)), P(mean φ_l(x)) )      local pseudo-data features pulled to the
                                                                      global model's, pushed from the local data's
    max step:  P ← P + η ∇_P ℓ_con(P)          (features detached: P learns to separate local from global)
    min step:  loss = CE(f(x), y) + λ_cls · CE(f(x_p), uniform) + λ_con · ℓ_con(P)     (P held fixed)

CE to uniform balances the local classifier (component 1); ℓ_con reduces the feature extractor's bias
(component 2). φ_g is the round's global model. With ``mixture`` (the authors' ``get_unlabeled_by_self``, their
README's default, and FLea's FedBR baseline) each pseudo-sample is first averaged with a random sample (x_j, y_j) of
the local batch, x_p ← (x_p + x_j)/2, and its target is (uniform + onehot(y_j))/2 instead of uniform. As in the
authors' code, the max step is one plain SGD step with the local learning rate, and P is aggregated with the model;
their P is d → 2d → 2d → d, ours has width ``projection_dim`` (docs/deviations.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad

from fed.algorithms.fedmix import MeanSharing
from fed.losses import contrastive_loss, one_hot, soft_cross_entropy
from fed.models.base import feature_dim


def projection_contrast(projection: nn.Module, params: dict, h_p, h_global, h_local, tau: float) -> torch.Tensor:
    """ℓ_con of the three feature views, each mapped by ``projection`` evaluated with ``params``."""
    z = [functional_call(projection, params, (h,)) for h in (h_p, h_global, h_local)]
    return contrastive_loss(*z, tau)


def adversarial_step(projection: nn.Module, h_p, h_global, h_local, tau: float, lr: float) -> None:
    """The max step: one gradient-ascent step of ℓ_con on the projection's parameters (features held fixed), in
    place. ``torch.func.grad``, so that a round's clients can take it together (``fed.batched``)."""
    params = dict(projection.named_parameters())

    def contrast(p):
        return projection_contrast(projection, p, h_p.detach(), h_global, h_local.detach(), tau)

    grads = grad(contrast)({k: v.detach() for k, v in params.items()})
    with torch.no_grad():
        for k, p in params.items():
            p.add_(grads[k], alpha=lr)


class FedBR(MeanSharing):
    name = "fedbr"
    vectorise = True

    def __init__(
        self,
        lam_cls: float = 1.0,
        lam_con: float = 0.5,
        tau: float = 0.5,
        mean_batch: int = 10,
        pseudo_batch: int = 32,
        projection_dim: int = 256,
        mixture: bool = False,
    ):
        super().__init__(lam=0.0, mean_batch=mean_batch)
        self.lam_cls, self.lam_con, self.tau, self.pseudo_batch = lam_cls, lam_con, tau, pseudo_batch
        self.projection_dim, self.mixture = projection_dim, mixture

    def extra_modules(self, model, input_shape):
        d, w = feature_dim(model, input_shape, of="embed"), self.projection_dim
        return {"projection": nn.Sequential(nn.Linear(d, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, w))}

    def step_draws(self, model, x, y, local, ctx):
        """The step's pseudo-data (``pseudo_batch`` shared means) and, with ``mixture``, a local partner each."""
        x_p, _ = self.draw(local, self.pseudo_batch)
        if not self.mixture:
            return {"x_p": x_p}
        return {"x_p": x_p, "j": torch.randint(len(y), (len(x_p),), generator=local.streams["rng"]).to(y.device)}

    def local_loss(self, model, x, y, local, ctx):
        x_p = local.draws["x_p"]
        num_classes = self.y_bar.shape[1]
        target = uniform = torch.full((len(x_p), num_classes), 1.0 / num_classes, device=x.device)
        if self.mixture:
            j = local.draws["j"]
            x_p, target = (x_p + x[j]) / 2, (uniform + one_hot(y[j], num_classes, uniform.dtype)) / 2
        h, h_p = model.embed(x), model.embed(x_p)  # penultimate representations φ
        with torch.no_grad():
            h_global = ctx.global_model().embed(x_p)
        h_local = h.mean(0, keepdim=True).expand(len(x_p), -1)
        projection = model.extras["projection"]
        adversarial_step(projection, h_p, h_global, h_local, self.tau, ctx.round_lr())
        # min step: P enters with detached parameters, so the optimiser leaves it where the max step put it
        fixed = {k: p.detach() for k, p in projection.named_parameters()}
        contrast = projection_contrast(projection, fixed, h_p, h_global, h_local, self.tau)
        balance = soft_cross_entropy(model.classify(h_p), target.to(h_p.dtype))
        return F.cross_entropy(model.classify(h), y) + self.lam_cls * balance + self.lam_con * contrast
