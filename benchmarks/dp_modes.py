"""Seconds per DP-SGD step of DA-FL's conditional GAN (``fed.dpgan.train_psg``) for each way it can clip per-sample
gradients (``PSGSettings.grad_sample_mode``: ``fed.ghost_clipping``, Opacus' hooks, functorch), at Table 2's
settings (width 64, Poisson batches of 256, σ = 0.5, c = 2) on one client of 5,400 random images, alternating the
modes in one process:

    python benchmarks/dp_modes.py [--steps 5] [--repeats 2] [--threads 1] [--device cpu|cuda]

Each mode computes the same clipped, noised gradient (tests/test_dafl.py); the last line is ``fastest=<mode>``.
"""

from __future__ import annotations

import argparse
import time

import torch

from fed.dpgan import GRAD_SAMPLE_MODES, PSGSettings, train_psg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(5400, 1, 32, 32, generator=g) * 2 - 1, torch.randint(0, 10, (5400,), generator=g)
    seconds = {m: [] for m in GRAD_SAMPLE_MODES}
    for mode in GRAD_SAMPLE_MODES:  # untimed: the first call pays CUDA's start-up and kernel choice (an H200: 7.8x)
        train_psg(x, y, 10, PSGSettings(rounds=1, schedule="iterations", grad_sample_mode=mode), 0, device=args.device)
    for _ in range(args.repeats):
        for mode in GRAD_SAMPLE_MODES:
            settings = PSGSettings(rounds=args.steps, schedule="iterations", grad_sample_mode=mode)
            t0 = time.perf_counter()
            result = train_psg(x, y, 10, settings, seed=0, device=args.device)
            seconds[mode].append((time.perf_counter() - t0) / result.steps)
    best = {m: min(s) for m, s in seconds.items()}
    for mode, s in best.items():
        print(f"{mode} ({args.device}): {s:.3f} s a step ({best['hooks'] / s:.2f}x hooks)", flush=True)
    print(f"fastest={min(best, key=best.get)}")


if __name__ == "__main__":
    main()
