"""Centralized training: the upper-bound row. One pooled "client" holds every client's training data; a round
is ``local_epochs`` epochs over it, so rounds stay comparable to the federated runs' evaluation points."""

from fed.algorithms.base import Algorithm

POOLED = -1


class Centralized(Algorithm):
    name = "centralized"

    def setup(self, ctx):
        ctx.add_pooled_client(POOLED)

    def select_clients(self, ctx):
        return [POOLED]
