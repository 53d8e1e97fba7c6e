"""Memory that per-client state costs in a SCAFFOLD run (control variates c_i) as the number of clients grows,
at 10 % participation with |D_k| = 50 (FLea's scarce setting). Measured: resident memory after training minus
after building the run (data and model loaded), so the data, which grows with the clients, is not counted.

Compared in the same run against the reference, the same engine with the client store held in memory
(``ClientStore(None)``): that grows with every client that ever trained, the on-disk store stays flat.

    python benchmarks/client_memory.py [--clients 100 1000] [--rounds 10]

Each (size, store) runs in a fresh process. Last line: ``disk_growth_ratio=… memory_growth_ratio=…``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch


def one(clients: int, rounds: int, store: str) -> dict:
    import psutil

    from fed.algorithms import build_algorithm
    from fed.client_store import ClientStore
    from fed.config import FLConfig
    from fed.data.datasets import load_dataset, load_labels, prepare
    from fed.data.partition import make_partition
    from fed.engine import Engine

    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp())
    n = 50 * clients * 10 // 8  # |D_k| = 50 after the 80/20 local split
    prepare("synthetic", root, synthetic={"n_train": n, "n_test": 200})
    part = make_partition(load_labels("synthetic", root), "iid", clients, seed=0)
    cfg = FLConfig(
        num_clients=clients,
        fraction=0.1,
        rounds=rounds,
        local_epochs=1,
        batch_size=32,
        eval_every=rounds,
        checkpoint_every=1,
    )
    work = root / "work"
    engine = Engine(
        cfg,
        build_algorithm("scaffold"),
        load_dataset("synthetic", root, "train"),
        load_dataset("synthetic", root, "test"),
        part,
        0,
        work_dir=work,
        progress=None,
    )
    if store == "memory":
        engine.ctx.clients = ClientStore(None)
    proc = psutil.Process()
    before = proc.memory_info().rss
    engine.run()
    after = proc.memory_info().rss
    return {
        "clients": clients,
        "store": store,
        "state_mb": (after - before) / 2**20,
        "clients_with_state": engine.ctx.clients.num_clients_with_state(),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--single", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--store", default="disk", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.single:
        print(json.dumps(one(args.single, args.rounds, args.store)))
        return
    rows = {}
    for store in ("disk", "memory"):
        for k in args.clients:
            out = subprocess.run(
                [sys.executable, __file__, "--single", str(k), "--rounds", str(args.rounds), "--store", store],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            rows[store, k] = json.loads(out.strip().splitlines()[-1])
            print(json.dumps(rows[store, k]))
    lo, hi = min(args.clients), max(args.clients)
    print(
        " ".join(
            f"{store}_state_mb_{lo}={rows[store, lo]['state_mb']:.1f} "
            f"{store}_state_mb_{hi}={rows[store, hi]['state_mb']:.1f}"
            for store in ("disk", "memory")
        )
    )


if __name__ == "__main__":
    main()
