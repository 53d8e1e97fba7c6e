"""FedProx (Li et al., 2020): local objective F_k(w) + (mu/2) ||w - w_t||^2 around the round's global model."""

from fed.algorithms.base import Algorithm


class FedProx(Algorithm):
    name = "fedprox"
    vectorise = True

    def __init__(self, mu: float = 0.01):
        self.mu = mu

    def local_loss(self, model, x, y, local, ctx):
        proximal = sum((w - w_t).pow(2).sum() for w, w_t in zip(model.parameters(), local.global_params))
        return super().local_loss(model, x, y, local, ctx) + 0.5 * self.mu * proximal
