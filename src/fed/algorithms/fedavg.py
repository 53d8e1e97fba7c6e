"""FedAvg (McMahan et al., 2017): local SGD, then the (weighted or simple) mean of the client models."""

from fed.algorithms.base import Algorithm


class FedAvg(Algorithm):
    name = "fedavg"
