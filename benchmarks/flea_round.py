"""Time and memory of a FLea round with 1,000 scarce clients (|D_k| = 50, 10 % participation: FLea's CIFAR-10
setting), against FedAvg's round in the same run: the reference is the same engine, data and clients without the
feature buffer, mixup, distillation and distance correlation.

    python benchmarks/flea_round.py [--clients 1000] [--rounds 3] [--model audionet --shape 1 28 28]
    python benchmarks/flea_round.py --model mobilenetv2_flea --shape 3 32 32 --rounds 1   # CIFAR-10's model

Each method runs in a fresh process (one thread) on generated data of the given shape; seconds per round exclude
evaluation (evaluated once, at the end). Peak memory is the process's maximum resident set (data included).
Last line: ``flea_time_ratio=… flea_peak_mb=… fedavg_peak_mb=… buffer_rows=…``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import torch


def one(method: str, clients: int, rounds: int, model: str, shape: list[int], epochs: int) -> dict:
    from fed.algorithms import build_algorithm
    from fed.config import FLConfig
    from fed.data.datasets import load_dataset, load_labels, prepare
    from fed.data.partition import make_partition
    from fed.engine import Engine

    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp())
    c, h, w = shape
    prepare("synthetic", root, synthetic={"n_train": 50 * clients, "n_test": 500, "channels": c, "size": h, "width": w})
    part = make_partition(load_labels("synthetic", root), "label_quantity", clients, seed=0, local_test_fraction=0, k=3)
    cfg = FLConfig(
        num_clients=clients,
        fraction=0.1,
        rounds=rounds,
        local_epochs=epochs,
        batch_size=32,
        lr=1e-3,
        optimizer="adam",
        aggregation="weighted",
        local_test_fraction=0.0,
        eval_every=rounds,
        checkpoint_every=rounds,
        model=model,
    )
    engine = Engine(
        cfg,
        build_algorithm(method),
        load_dataset("synthetic", root, "train"),
        load_dataset("synthetic", root, "test"),
        part,
        0,
        progress=None,
    )
    engine.run()
    rows = engine.history
    return {
        "method": method,
        "seconds_per_round": sum(r["seconds"] for r in rows) / len(rows),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "buffer_rows": max((r.get("flea_buffer_size", 0) for r in rows), default=0),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--model", default="audionet")
    ap.add_argument("--shape", type=int, nargs=3, default=[1, 28, 28])
    ap.add_argument("--single", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.single:
        print(json.dumps(one(args.single, args.clients, args.rounds, args.model, args.shape, args.epochs)))
        return
    out = {}
    for method in ("fedavg", "flea"):
        cmd = [sys.executable, __file__, "--single", method, "--clients", str(args.clients), "--rounds"]
        cmd += [str(args.rounds), "--epochs", str(args.epochs), "--model", args.model, "--shape", *map(str, args.shape)]
        proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
        out[method] = json.loads(proc.stdout.splitlines()[-1])
        print(out[method], flush=True)
    ratio = out["flea"]["seconds_per_round"] / out["fedavg"]["seconds_per_round"]
    print(
        f"flea_time_ratio={ratio:.2f} flea_peak_mb={out['flea']['peak_mb']:.0f} "
        f"fedavg_peak_mb={out['fedavg']['peak_mb']:.0f} buffer_rows={out['flea']['buffer_rows']}"
    )


if __name__ == "__main__":
    main()
