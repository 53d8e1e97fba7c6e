"""DA-FL's GAN stage cost: seconds per DP-SGD step of one client's conditional GAN (``fed.dpgan.train_psg``) at
Table 2's settings (width 64, Poisson batches of 256, σ = 0.5, c = 2), one thread, on Fashion-MNIST, and the steps
each client of a partition takes before ε reaches ε0 (Opacus' RDP accountant, as the stage stops).

    python benchmarks/psg_time.py [--samples 6000] [--epochs 1] [--data-root data] [--partition partitions/…json]

Last line: ``seconds_per_step=<s>``; with ``--partition``, also the steps and the estimated hours of that
partition's GAN stage (its clients train one after another).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent
from opacus.accountants.rdp import RDPAccountant

from fed.config import load_yaml
from fed.data.datasets import info, load_dataset
from fed.dpgan import PSGSettings, to_gan_space, train_psg

REPO = Path(__file__).resolve().parents[1]
# Table 2's GAN block as DA-FL's config gives it (ε0 = 50); `rounds` (epochs) is set by --epochs
GAN = load_yaml(REPO / "config/papers/dafl.yaml")["methods"]["dafl_gamma0.01"]["gan"]


def steps_to_budget(n: int, epochs: int = 50) -> int:
    """DP-SGD steps a client of n samples takes: the largest k with ε(k) < ε0, at most the epochs' schedule."""
    q, orders = min(1.0, GAN["batch_size"] / n), RDPAccountant.DEFAULT_ALPHAS

    def eps(k: int) -> float:
        rdp = compute_rdp(q=q, noise_multiplier=GAN["noise_multiplier"], steps=k, orders=orders)
        return get_privacy_spent(orders=orders, rdp=rdp, delta=GAN["delta"])[0]

    lo, hi = 0, epochs * math.ceil(n / GAN["batch_size"])
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if eps(mid) < GAN["epsilon"] else (lo, mid - 1)
    return lo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=6000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--data-root", default="data")
    ap.add_argument("--partition", help="a partition JSON of the workflow: its clients' step counts and hours")
    args = ap.parse_args()
    torch.set_num_threads(1)
    train, meta = load_dataset("fmnist", args.data_root, "train"), info("fmnist")
    idx = torch.randperm(len(train.y), generator=torch.Generator().manual_seed(0))[: args.samples]
    settings = PSGSettings.from_params(GAN | {"rounds": args.epochs})
    start = time.perf_counter()
    result = train_psg(to_gan_space(train.x[idx], meta.mean, meta.std), train.y[idx], 10, settings, 0, None)
    per_step = (time.perf_counter() - start) / max(result.steps, 1)
    if args.partition:
        part = json.loads(open(args.partition).read())
        sizes = [sum(c) - round(part["local_test_fraction"] * sum(c)) for c in part["counts"]]
        steps = [steps_to_budget(n) for n in sizes]
        print(
            f"clients' training sizes {sizes}\nsteps to ε0 = {GAN['epsilon']:g}: {steps}, {sum(steps)} in all, "
            f"≈ {sum(steps) * per_step / 3600:.1f} h at this step time"
        )
    print(f"seconds_per_step={per_step:.2f}")


if __name__ == "__main__":
    main()
