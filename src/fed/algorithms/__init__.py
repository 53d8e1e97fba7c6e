"""Method registry. ``ALGORITHMS`` maps the config name of every implemented method to its class; ``PLANNED``
lists the methods of the four papers that are accepted in a config but not yet implemented."""

from fed.algorithms.base import Algorithm, ClientResult, LocalContext
from fed.algorithms.ccvr import CCVR
from fed.algorithms.centralized import Centralized
from fed.algorithms.dafl import DAFL
from fed.algorithms.fedavg import FedAvg
from fed.algorithms.fedavg_matched import FedAvgMatched
from fed.algorithms.fedbr import FedBR
from fed.algorithms.feddata import FedData
from fed.algorithms.feddecorr import FedDecorr
from fed.algorithms.feddpms import FedDPMS
from fed.algorithms.fedgen import FedGen
from fed.algorithms.fedlc import FedLC
from fed.algorithms.fedmix import FedMix, NaiveMix
from fed.algorithms.fednova import FedNova
from fed.algorithms.fedntd import FedNTD
from fed.algorithms.fedprox import FedProx
from fed.algorithms.fedzda import FedZDAC, FedZDAS
from fed.algorithms.flea import FLea
from fed.algorithms.moon import Moon
from fed.algorithms.qffl import QFFL
from fed.algorithms.scaffold import Scaffold

ALGORITHMS: dict[str, type[Algorithm]] = {
    cls.name: cls
    for cls in (
        FedAvg,
        FedProx,
        QFFL,
        Centralized,
        FedZDAC,
        FedZDAS,
        Scaffold,
        FedNova,
        Moon,
        FedMix,
        NaiveMix,
        FedDecorr,
        FedLC,
        FedNTD,
        FedBR,
        CCVR,
        FedGen,
        FedData,
        FedAvgMatched,
        DAFL,
        FedDPMS,
        FLea,
    )
}

PLANNED: set[str] = set()  # methods accepted in a config before they are implemented (none now)


def build_algorithm(name: str, **params) -> Algorithm:
    if name not in ALGORITHMS:
        hint = " (planned, not yet implemented)" if name in PLANNED else ""
        raise ValueError(f"unknown algorithm {name!r}{hint}; valid choices: {sorted(ALGORITHMS)}")
    return ALGORITHMS[name](**params)


__all__ = ["ALGORITHMS", "PLANNED", "Algorithm", "ClientResult", "LocalContext", "build_algorithm"]
