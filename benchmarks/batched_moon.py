"""MOON's batched round on a BatchNorm model (FedDPMS' FMNIST CNN) against the loop, three rounds each: from round 2
the clients' previous models differ and are stacked (a channels-last stack failed on CUDA before f5e6997).

    python benchmarks/batched_moon.py cuda [IMAGES]    # IMAGES: the first N of Fashion-MNIST's training set (60000)

Prints each round's seconds and, last, the largest difference of the two global models (float32 rounding).
"""

import sys
import time

from fed.algorithms import build_algorithm
from fed.config import FLConfig
from fed.data.datasets import load_dataset, load_labels
from fed.data.partition import make_partition
from fed.engine import Engine
from fed.rounds import run_round

dev = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 60000
labels = load_labels("fmnist", "data")[:n]
part = make_partition(labels, "dirichlet", 4, seed=0, beta=0.5)
train, test = load_dataset("fmnist", "data", "train"), load_dataset("fmnist", "data", "test")
out = {}
for vec in (False, True):
    cfg = FLConfig(num_clients=4, fraction=1.0, local_epochs=1, batch_size=64, lr=0.01, model="cnn_dpms_fmnist",
                   rounds=5, vectorise=vec, device=dev, deterministic=False, local_test_fraction=0.0)  # fmt: skip
    e = Engine(cfg, build_algorithm("moon", mu=10.0), train, test, part, seed=0, progress=None)
    e.algorithm.setup(e.ctx)
    for r in range(3):
        t0 = time.perf_counter()
        row = run_round(e.ctx, e.algorithm)
        seconds = time.perf_counter() - t0
        print(f"vectorise={vec} round {r + 1}: {seconds:.2f} s", {k: row[k] for k in row if k == "batched_clients"})
    out[vec] = e.global_state
print(
    "max diff loop vs batched:",
    max((out[False][k].float() - out[True][k].float()).abs().max().item() for k in out[False]),
)
