"""ZSDG cost per Fed-ZDAC round against a FedAvg round measured in the same run (Fashion-MNIST when available,
else generated data of the same shape; 100-client unimodal partition, 10 clients per round, E=5, B=10, one thread).

    python benchmarks/zsdg_time.py [--per-class 10] [--iterations 200] [--rounds 2] [--data-root data]

Measures, per round: a FedAvg round (``fed.rounds.run_round``), ZSDG for the 10 sampled clients one by one
(``zsdg``), the same batches optimised in one pass (``zsdg_batched``), and the floor of any implementation: the
model's forward and backward to the input for the same images and iterations, nothing else. Last line:
``separate_over_fedavg=<x> batched_over_fedavg=<y> speedup=<z> floor_over_fedavg=<w>`` (target: ≤ 0.5 × a FedAvg
round; a floor above 0.5 means that the budget, not the implementation, misses it on this machine).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fed.algorithms import build_algorithm
from fed.config import FLConfig
from fed.data.datasets import load_dataset, load_labels
from fed.data.partition import make_partition
from fed.engine import Engine
from fed.rounds import run_round
from fed.zsdg import ZSDGConfig, zsdg, zsdg_batched

CFG = dict(num_clients=100, fraction=0.1, local_epochs=5, batch_size=10, lr=0.02, rounds=1)


def main() -> None:
    from round_time import dataset  # the same data choice as the round-time benchmark

    ap = argparse.ArgumentParser()
    ap.add_argument("--per-class", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--data-root", default="data")
    args = ap.parse_args()
    torch.set_num_threads(1)
    name = dataset(args.data_root)
    part = make_partition(load_labels(name, args.data_root), "unimodal", 100, seed=0)
    engine = Engine(
        FLConfig(**CFG),
        build_algorithm("fedavg"),
        load_dataset(name, args.data_root, "train"),
        load_dataset(name, args.data_root, "test"),
        part,
        seed=0,
        progress=None,
    )
    ctx, cfg = engine.ctx, ZSDGConfig(per_class=args.per_class, iterations=args.iterations)
    fedavg, separate, batched, floor = [], [], [], []
    for _ in range(args.rounds):
        t = time.perf_counter()
        run_round(ctx, engine.algorithm)
        fedavg.append(time.perf_counter() - t)
        clients = ctx.sample_clients()
        ctx.model.load_state_dict(ctx.global_state)
        t = time.perf_counter()
        for g in [ctx.rng("zsdg", ctx.round, k) for k in clients]:
            zsdg(ctx.model, ctx.num_classes, ctx.input_shape, cfg, g, ctx.device, ctx.memory_format)
        separate.append(time.perf_counter() - t)
        t = time.perf_counter()
        gens = [ctx.rng("zsdg", ctx.round, k) for k in clients]
        zsdg_batched(ctx.model, ctx.num_classes, ctx.input_shape, cfg, gens, ctx.device, ctx.memory_format)
        batched.append(time.perf_counter() - t)
        floor.append(inversion_floor(ctx, cfg, len(clients)))
    f, s, b, lo = (statistics.median(v) for v in (fedavg, separate, batched, floor))
    print(f"dataset={name} per_class={args.per_class} iterations={args.iterations} rounds={args.rounds} threads=1")
    print(f"fedavg_s_per_round={f:.2f} zsdg_separate_s={s:.2f} zsdg_batched_s={b:.2f} floor_s={lo:.2f}")
    ratios = f"separate_over_fedavg={s / f:.2f} batched_over_fedavg={b / f:.2f} speedup={s / b:.2f}"
    print(f"{ratios} floor_over_fedavg={lo / f:.2f}")


def inversion_floor(ctx, cfg: ZSDGConfig, clients: int) -> float:
    """The part of ZSDG no implementation (in float32, on these kernels) avoids: the model's forward and its backward
    to the input, for every image of every client at every iteration, one client's batch at a time, with neither the
    BN-statistics loss nor the optimiser step."""
    model = ctx.model.eval()
    requires = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.randn((cfg.per_class * ctx.num_classes, *ctx.input_shape), device=ctx.device)
    x = x.contiguous(memory_format=ctx.memory_format)
    x.requires_grad_(True)
    t = time.perf_counter()
    for _ in range(clients * cfg.iterations):
        torch.autograd.grad(model(x).sum(), x)
    seconds = time.perf_counter() - t
    for p, r in zip(model.parameters(), requires):
        p.requires_grad_(r)
    return seconds


if __name__ == "__main__":
    main()
