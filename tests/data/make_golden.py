"""Writes tests/data/golden_fedzda_smoke.json: six Fed-ZDA smoke cells (3 rounds) in float64, so that the golden
holds on any CPU (kernels of another instruction set round float32 differently: up to 5.4e-5 relative after two
rounds; in float64 `ATEN_CPU_CAPABILITY=default` and `=avx2` agree to 5e-15).

The golden is the engine before the issue-7 refactor (commit e2d9fbb), written with this script against a worktree
of that commit (its Fed-ZDAS has no keep_bn_statistics and behaves as keep_bn_statistics=False):

    git worktree add /tmp/pre e2d9fbb
    PYTHONPATH=/tmp/pre/src python tests/data/make_golden.py tests/data/golden_fedzda_smoke.json

tests/test_architecture.py runs the same script on today's code. The two differ by at most 1.9e-9 relative for
FedAvg, FedProx, q-FFL and centralized and 9.6e-8 for Fed-ZDAC/S (operation order: float64 accumulation of the
aggregate, ZSDG's two-pass BN moments, c9117e4), so the test allows 1e-6 — far below what a changed update moves."""

import json
import sys
import tempfile
from pathlib import Path

import torch

from fed.algorithms import build_algorithm
from fed.config import FLConfig
from fed.data.datasets import load_dataset, load_labels, prepare
from fed.data.partition import make_partition
from fed.engine import Engine

# results depend on the thread count in the last bits (in float64 far below the test's 1e-6; the golden was written
# with two threads), and a test that ran before may have changed it. One thread, as an xdist worker trains: two
# threads with the other core busy took 185 s against 28 s on a 2-core EPYC (2026-12-03); the caller restores both.
torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)  # models, ZSDG's inputs, every new tensor
root = Path(tempfile.mkdtemp())
prepare("synthetic", root, synthetic={"n_train": 600, "n_test": 200})


def load(split):
    data = load_dataset("synthetic", root, split)
    data.x = data.x.double()  # the loader's float32 images, widened
    return data


train, test = load("train"), load("test")
part = make_partition(load_labels("synthetic", root), "unimodal", 10, seed=0)
SMALL = dict(num_clients=10, fraction=0.3, rounds=3, local_epochs=1, batch_size=20, eval_every=1)
zs = {"per_class": 2, "iterations": 5}
methods = {
    "fedavg": {},
    "fedprox": {"mu": 0.01},
    "qffl": {"q": 1.0},
    "centralized": {},
    "fedzdac": {"zsdg": zs},
    "fedzdas": {"zsdg": zs, "start_round": 2, "keep_bn_statistics": False},
}
out = {}
for name, params in methods.items():
    try:
        algorithm = build_algorithm(name, **params)
    except TypeError:  # e2d9fbb's Fed-ZDAS: keep_bn_statistics=False was its only behaviour
        algorithm = build_algorithm(name, **{k: v for k, v in params.items() if k != "keep_bn_statistics"})
    res = Engine(FLConfig(**SMALL), algorithm, train, test, part, 0, progress=None).run()
    out[name] = {
        "params": params,
        "history": [{k: v for k, v in r.items() if "seconds" not in k} for r in res["history"]],
    }
Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
