"""Seconds per Fed-ZDA FMNIST round (10 clients x 5 epochs x B=10, 100-client unimodal partition) for our engine,
against a naive reference loop measured in the same run, and our overhead over pure compute.

    python benchmarks/round_time.py [--rounds 3] [--data-root data] [--no-parallel]

Last line: ``speedup_vs_naive=<x> overhead=<y>`` (checked by scripts). Also measures two rounds side by side
in two processes (one thread each) against one alone: ``parallel_throughput=<z>`` (2.0 = perfect).
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from fed.algorithms import build_algorithm
from fed.config import FLConfig
from fed.data.datasets import DATASETS, DatasetUnavailableError, cache_path, load_dataset, load_labels, prepare
from fed.data.partition import make_partition
from fed.engine import Engine
from fed.models import build_model
from fed.rounds import run_round

CFG = dict(num_clients=100, fraction=0.1, local_epochs=5, batch_size=10, lr=0.02, rounds=1)


def dataset(root: str) -> str:
    """Fashion-MNIST when available offline or online, else the synthetic set of the same shape (1x28x28)."""
    try:
        if not cache_path(root, "fmnist").exists():
            prepare("fmnist", root, download=False)
        return "fmnist"
    except DatasetUnavailableError:
        prepare("synthetic", root, synthetic={"n_train": 60000, "n_test": 1000})
        return "synthetic"


def setup(root: str, name: str):
    part = make_partition(load_labels(name, root), "unimodal", 100, seed=0)
    engine = Engine(
        FLConfig(**CFG),
        build_algorithm("fedavg"),
        load_dataset(name, root, "train"),
        load_dataset(name, root, "test"),
        part,
        seed=0,
        progress=None,
    )
    return engine, part


def our_round(engine: Engine, r: int) -> float:
    """One round as the engine runs it — ``fed.rounds.run_round`` itself (sampling, local SGD, aggregation,
    server update), without evaluation."""
    t = time.perf_counter()
    engine.ctx.round = r - 1
    run_round(engine.ctx, engine.algorithm)
    return time.perf_counter() - t


def pure_compute(engine: Engine, clients: list[int]) -> float:
    """Forward+backward+step of the same number of samples, batch 10, one preloaded tensor, one model."""
    ctx = engine.ctx
    model = copy.deepcopy(ctx.model).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    n = sum(len(ctx.train_idx[k]) for k in clients) * CFG["local_epochs"]
    x = ctx.train_set.x[: CFG["batch_size"]].contiguous(memory_format=ctx.memory_format)
    y = ctx.train_set.y[: CFG["batch_size"]]
    t = time.perf_counter()
    for _ in range(int(np.ceil(n / CFG["batch_size"]))):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - t


def naive_round(root: str, name: str, part: dict, clients: list[int], global_model) -> float:
    """What a typical research script does: deepcopy per client, torchvision dataset with per-sample
    transforms, DataLoader(batch_size=10, shuffle=True), then average the state dicts."""
    import torchvision.transforms as T
    from torch.utils.data import DataLoader, Subset

    meta = DATASETS[name]
    tf = T.Compose([T.ToTensor(), T.Normalize(meta.mean, meta.std)])
    if name == "fmnist":
        import torchvision

        ds = torchvision.datasets.FashionMNIST(root, train=True, transform=tf)
    else:
        raw = torch.load(cache_path(root, name), weights_only=True)
        ds = [(T.functional.to_pil_image(img), int(lbl)) for img, lbl in zip(raw["x_train"], raw["y_train"])]
        ds = _Transformed(ds, tf)
    t = time.perf_counter()
    states = []
    for k in clients:
        model = copy.deepcopy(global_model).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.02)
        loader = DataLoader(Subset(ds, part["clients"][k]["train"]), batch_size=10, shuffle=True)
        for _ in range(CFG["local_epochs"]):
            for xb, yb in loader:
                loss = F.cross_entropy(model(xb), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
        states.append(model.state_dict())
    avg = {key: sum(s[key].float() for s in states) / len(states) for key in states[0]}
    global_model.load_state_dict({k: v.to(states[0][k].dtype) for k, v in avg.items()})
    return time.perf_counter() - t


class _Transformed(torch.utils.data.Dataset):
    def __init__(self, items, tf):
        self.items, self.tf = items, tf

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        img, lbl = self.items[i]
        return self.tf(img), lbl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data-root", default="data")
    ap.add_argument("--no-parallel", action="store_true")
    ap.add_argument("--single", action="store_true", help=argparse.SUPPRESS)  # child of the parallel test
    args = ap.parse_args()
    torch.set_num_threads(1)
    name = dataset(args.data_root)
    engine, part = setup(args.data_root, name)
    if args.single:
        print(json.dumps([our_round(engine, r) for r in range(1, args.rounds + 1)]))
        return
    ours, pure, naive = [], [], []
    naive_model = build_model("cnn_mnist", 1, 10, 28)
    for r in range(1, args.rounds + 1):
        ours.append(our_round(engine, r))
        clients = engine.algorithm.select_clients(engine.ctx)
        pure.append(pure_compute(engine, clients))
        naive.append(naive_round(args.data_root, name, part, clients, naive_model))
    o, p, n = (float(np.median(v)) for v in (ours, pure, naive))
    print(f"dataset={name} rounds={args.rounds} torch={torch.__version__} threads=1")
    print(f"ours_s_per_round={o:.2f} pure_compute_s={p:.2f} naive_s_per_round={n:.2f}")
    if not args.no_parallel:
        cmd = [sys.executable, __file__, "--single", "--rounds", str(args.rounds), "--data-root", args.data_root]
        alone = float(np.median(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)))
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
        side = [float(np.median(json.loads(p.communicate()[0]))) for p in procs]
        print(
            f"alone_s_per_round={alone:.2f} side_by_side_s_per_round={side[0]:.2f},{side[1]:.2f} "
            f"parallel_throughput={2 * alone / float(np.mean(side)):.2f}"
        )
    print(f"speedup_vs_naive={n / o:.2f} overhead={o / p - 1:.3f}")


if __name__ == "__main__":
    main()
