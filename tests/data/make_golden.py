"""Writes tests/data/golden_fedzda_smoke.json. It was run once on the code before the issue-7 refactor (commit e2d9fbb);
tests/test_architecture.py checks that the refactored engine reproduces it. Fed-ZDAS runs with
keep_bn_statistics=False: the behaviour of that code (issue 9 made keeping the real statistics the default).
Its fedzdac and fedzdas entries were rewritten once since, when ZSDG's BN-input moments moved from torch.var to two
passes (fed.zsdg.channel_moments, c9117e4): the same values to rounding, which moved those two methods' numbers by at
most 2.1e-6 relative; the other four methods' entries are still those of e2d9fbb, unchanged to the last bit."""

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

# The golden file was written with torch's default on the 2-core CI machine, 2 threads; results depend on the thread
# count in the last bits, and a test that ran before may have changed it (run_stage sets 1).
torch.set_num_threads(2)
root = Path(tempfile.mkdtemp())
prepare("synthetic", root, synthetic={"n_train": 600, "n_test": 200})
train, test = load_dataset("synthetic", root, "train"), load_dataset("synthetic", root, "test")
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
    res = Engine(FLConfig(**SMALL), build_algorithm(name, **params), train, test, part, 0, progress=None).run()
    out[name] = {
        "params": params,
        "history": [{k: v for k, v in r.items() if "seconds" not in k} for r in res["history"]],
    }
Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
