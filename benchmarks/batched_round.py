"""Seconds per round, the clients trained one after another (the loop) against together (``vectorise: true``,
fed.batched), alternating in one process on one thread (or on ``--device cuda``), for two protocols on
Fashion-MNIST (or synthetic data of its shape where it is not prepared):

- ``fedzda``: Fed-ZDA's round — 10 of 100 unimodal clients, E = 5, B = 10, lr 0.02, its CNN (cnn_mnist);
- ``dafl``: DA-FL's round — all 10 clients of a Dir(0.05) partition, all their data, B = 32, momentum 0.5, its CNN
  (cnn_dafl); ``--dafl-epochs`` (default 1 of the protocol's 5: the seconds scale with it);
- ``dpms``: FedDPMS' FMNIST CNN (BatchNorm, channels-last) — 4 clients of a Dir(0.5) partition, E = 1, B = 64, lr
  0.01; with ``--method moon --rounds 3`` its batched rounds 2–3 stack each client's previous model (they failed on
  CUDA before f5e6997).

    python benchmarks/batched_round.py [--rounds 2] [--data-root data] [--only fedzda|dafl|dpms] [--device cpu|cuda]
                                       [--nondeterministic] [--method fedavg|fedmix|…] [--clients N]
                                       [--profile FILE]

Prints a row per protocol (seconds looped, batched, their ratio, and the largest difference of the two global
models after the same rounds: float32 rounding) and, last, ``speedup_<protocol>=<x>`` for each. ``--clients``
trains that many clients a round (FedDPMS' chart: 10). ``--profile FILE`` then profiles one more batched round
(``torch.profiler``) and writes its operators by their own time on the device (on the CPU where it runs there) to
FILE, headed by how much of the round's wall time the device was busy and how many kernels it launched: whether a
batched step waits on launches or on its kernels.
"""

from __future__ import annotations

import argparse
import time

import torch
from round_time import dataset  # Fashion-MNIST where prepared, else synthetic data of its shape

from fed.algorithms import build_algorithm
from fed.config import FLConfig
from fed.data.datasets import load_dataset, load_labels
from fed.data.partition import make_partition
from fed.engine import Engine
from fed.rounds import run_round

PROTOCOLS = {
    "fedzda": (
        dict(num_clients=100, fraction=0.1, local_epochs=5, batch_size=10, lr=0.02, model="cnn_mnist"),
        ("unimodal", {}),
    ),
    "dafl": (
        dict(
            num_clients=10,
            fraction=1.0,
            local_epochs=1,
            batch_size=32,
            lr=0.01,
            momentum=0.5,
            model="cnn_dafl",
            aggregation="weighted",
            local_test_fraction=0.1,
        ),
        ("dirichlet", {"beta": 0.05}),
    ),  # fmt: skip
    "dpms": (
        dict(
            num_clients=4,
            fraction=1.0,
            local_epochs=1,
            batch_size=64,
            lr=0.01,
            model="cnn_dpms_fmnist",
            local_test_fraction=0.0,
        ),
        ("dirichlet", {"beta": 0.5}),
    ),  # fmt: skip
}


def engine(
    name: str, root: str, cfg: dict, scheme: tuple, vectorise: bool, device: str, fast: bool, method: str
) -> Engine:
    part = make_partition(load_labels(name, root), scheme[0], cfg["num_clients"], seed=0, **scheme[1])
    train, test = load_dataset(name, root, "train"), load_dataset(name, root, "test")
    config = FLConfig(**cfg, rounds=100, vectorise=vectorise, device=device, deterministic=not fast)  # channels-last
    e = Engine(config, build_algorithm(method), train, test, part, seed=0, progress=None)
    e.algorithm.setup(e.ctx)  # as Engine.run does before its first round (FedMix shares its means there)
    return e


def measure(
    name: str,
    root: str,
    protocol: str,
    rounds: int,
    epochs: int | None,
    device: str,
    fast=False,
    method="fedavg",
    clients: int | None = None,
    profile_to: str | None = None,
):
    cfg, scheme = PROTOCOLS[protocol]
    cfg = cfg | ({"local_epochs": epochs} if epochs else {}) | ({"num_clients": clients} if clients else {})
    loop, batched = (engine(name, root, cfg, scheme, vectorise, device, fast, method) for vectorise in (False, True))
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)  # GPU kernels run on after a call
    times = {False: [], True: []}
    for _ in range(rounds):  # alternate, so that a change of load touches both
        for e in (loop, batched):
            sync()
            t0 = time.perf_counter()
            run_round(e.ctx, e.algorithm)
            sync()
            times[e.cfg.vectorise].append(time.perf_counter() - t0)
    diff = max((loop.global_state[k].float() - batched.global_state[k].float()).abs().max().item()
               for k in loop.global_state)  # fmt: skip
    if profile_to:
        profile_round(batched, sync, profile_to, f"{protocol} {method}, {cfg['num_clients']} clients batched")
    return min(times[False]), min(times[True]), diff


def profile_round(e: Engine, sync, path: str, what: str) -> None:
    """One more batched round under ``torch.profiler``: the device's busy share of its wall time, its kernels, and
    the operators by their own device time."""
    from torch.profiler import ProfilerActivity, profile

    cuda = e.cfg.device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        sync()
        t0 = time.perf_counter()
        run_round(e.ctx, e.algorithm)
        sync()
        wall = time.perf_counter() - t0
    averages = prof.key_averages()
    if cuda:  # kernels: the events that ran on the device
        kernels = [a for a in averages if a.device_type == torch.autograd.DeviceType.CUDA]
        busy = sum(a.self_device_time_total for a in kernels) / 1e6
        head = f"{len(kernels)} kinds of kernel, {sum(a.count for a in kernels)} launches, busy {busy:.2f} s"
        sort = "self_device_time_total"
    else:
        busy = sum(a.self_cpu_time_total for a in averages) / 1e6
        head, sort = f"operators' own CPU time {busy:.2f} s", "self_cpu_time_total"
    with open(path, "w") as f:
        print(f"{what} on {e.cfg.device}: one round {wall:.2f} s; {head} ({busy / wall:.0%} of the wall time)", file=f)
        print(averages.table(sort_by=sort, row_limit=30), file=f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--data-root", default="data")
    ap.add_argument("--dafl-epochs", type=int, default=1)
    ap.add_argument("--only", choices=sorted(PROTOCOLS))
    ap.add_argument("--device", default="cpu", help="cpu (one thread), cuda, …")
    ap.add_argument("--nondeterministic", action="store_true", help="CUDA: deterministic: false")
    ap.add_argument("--method", default="fedavg", help="the method whose round is timed (its default settings)")
    ap.add_argument("--clients", type=int, help="clients a round (default: the protocol's)")
    ap.add_argument("--profile", metavar="FILE", help="profile one more batched round into FILE (the last protocol's)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    name = dataset(args.data_root)
    speedups = {}
    for protocol in [args.only] if args.only else PROTOCOLS:
        epochs = args.dafl_epochs if protocol == "dafl" else None
        loop, batched, diff = measure(
            name, args.data_root, protocol, args.rounds, epochs, args.device, args.nondeterministic, args.method,
            args.clients, args.profile,
        )  # fmt: skip
        speedups[protocol] = loop / batched
        print(f"{protocol} {args.method} ({name}, {args.device}): looped {loop:.2f} s, batched {batched:.2f} s a "
              f"round, {loop / batched:.2f}x; global models differ by at most {diff:.1e}", flush=True)  # fmt: skip
    print(" ".join(f"speedup_{p}={s:.2f}" for p, s in speedups.items()))


if __name__ == "__main__":
    main()
