"""Centralized training: the upper-bound row. One pooled "client" holds every client's training data; a round
is ``local_epochs`` epochs over it, so rounds stay comparable to the federated runs' evaluation points."""

from fed.algorithms.base import Algorithm

POOLED = -1


class Centralized(Algorithm):
    name = "centralized"

    def select_clients(self, ctx):
        return [POOLED]

    def client_update(self, ctx, client):
        ctx.model.load_state_dict(ctx.global_state)
        return self.train_locally(ctx, client, *ctx.pooled_data())
