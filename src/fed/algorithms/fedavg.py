"""FedAvg (McMahan et al., 2017): local SGD, then the (weighted or simple) mean of the client models."""

import math

from fed.algorithms.base import Algorithm


class FedAvg(Algorithm):
    name = "fedavg"
    fedavg_until = math.inf
    vectorise = True
