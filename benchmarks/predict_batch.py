"""Prediction's batch size: seconds to predict the FMNIST test set with FedDPMS' CNN (the head-to-head's model) and
Fed-ZDA's, in batches of 1,000 (the old default) and of ``fed.training.PREDICT_BATCH``, alternated in one run, and
whether the logits are the same.

    python benchmarks/predict_batch.py [--data-root data] [--repeats 5]

Last line: ``ratio_<model>=<old / new seconds, median> same_logits=<bool>`` per model (one thread).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fed.data.datasets import load_dataset
from fed.models import build_model
from fed.training import PREDICT_BATCH


@torch.inference_mode()
def logits(model, x, batch):
    return torch.cat([model(xb) for xb in x.split(batch)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-root", default="data")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = load_dataset("fmnist", args.data_root, "test").x
    out = []
    for name in ("cnn_dpms_fmnist", "cnn_mnist"):
        model = build_model(name, num_classes=10, in_channels=1, image_size=28).eval()
        seconds = {1000: [], PREDICT_BATCH: []}
        for _ in range(args.repeats):
            for batch in seconds:  # alternated, so a drift in the machine's speed hits both
                start = time.perf_counter()
                logits(model, x, batch)
                seconds[batch].append(time.perf_counter() - start)
        same = torch.equal(logits(model, x, 1000), logits(model, x, PREDICT_BATCH))
        old, new = (statistics.median(s) for s in seconds.values())
        print(f"{name}: batch 1000 {old:.2f} s, batch {PREDICT_BATCH} {new:.2f} s (median of {args.repeats})")
        out.append(f"ratio_{name}={old / new:.2f} same_logits={same}")
    print(" ".join(out))


if __name__ == "__main__":
    main()
