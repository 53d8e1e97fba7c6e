"""Method registry. ``ALGORITHMS`` maps the config name of every implemented method to its class; ``PLANNED``
lists the methods of the four papers that are accepted in a config but not yet implemented."""

from fed.algorithms.base import Algorithm, ClientResult, LocalContext
from fed.algorithms.centralized import Centralized
from fed.algorithms.fedavg import FedAvg
from fed.algorithms.fedprox import FedProx
from fed.algorithms.fedzda import FedZDAC, FedZDAS
from fed.algorithms.qffl import QFFL

ALGORITHMS: dict[str, type[Algorithm]] = {cls.name: cls for cls in (FedAvg, FedProx, QFFL, Centralized, FedZDAC, FedZDAS)}

PLANNED = {
    "fedzdac", "fedzdas",  # Fed-ZDA
    "feddpms", "moon", "fedmix",  # FedDPMS
    "dafl", "scaffold", "fednova",  # DA-FL
    "flea", "feddecorr", "fedlc", "fedntd", "fedbr", "ccvr", "fedgen", "feddata",  # FLea
} - set(ALGORITHMS)


def build_algorithm(name: str, **params) -> Algorithm:
    if name not in ALGORITHMS:
        hint = " (planned, not yet implemented)" if name in PLANNED else ""
        raise ValueError(f"unknown algorithm {name!r}{hint}; valid choices: {sorted(ALGORITHMS)}")
    return ALGORITHMS[name](**params)


__all__ = ["ALGORITHMS", "PLANNED", "Algorithm", "ClientResult", "LocalContext", "build_algorithm"]
