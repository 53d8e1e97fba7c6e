"""Are DA-FL's synthetic samples of the class they are labelled with? For each ``dp_cgan`` stage (its output file, or
its work directory while it trains), each client and each class the client holds: the share of its generator's
samples at that class that a judge trained centrally on the real training set assigns to it
(``fed.reporting.gan_fidelity``), and per client that share weighted by the client's class counts — the share of
what it would share that carries a recognisable label.

    python scripts/gan_fidelity.py STAGE [STAGE …] --partition FILE [--data-root data] [--per-class 500]
    python scripts/gan_fidelity.py results/stages/dafl/fmnist/1-label/seed0/dp_cgan-epsilon50.0-af303892.pt \\
        --partition partitions/dafl/fmnist/1-label/seed0.json

The judge (``--judge-model``, ``--judge-epochs``, seed 0) is trained once per call and its test accuracy printed:
the real test images score that, a judge guessing at random 1/L.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from fed.data.datasets import info, load_dataset
from fed.reporting.gan_fidelity import fidelity_rows, stage_generators, train_judge
from fed.training import predict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stages", nargs="+", type=Path, help="dp_cgan stage files or their work directories")
    parser.add_argument("--partition", type=Path, required=True, help="the partition the stages were trained on")
    parser.add_argument("--dataset", help="default: the partition's (partitions/PRESET/DATASET/PARTITION/seedS.json)")
    parser.add_argument("--data-root", default="data")
    parser.add_argument("--per-class", type=int, default=500, help="samples per client and class")
    parser.add_argument("--judge-model", default="cnn_dafl")
    parser.add_argument("--judge-epochs", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    partition = json.loads(args.partition.read_text())
    dataset = args.dataset or args.partition.parent.parent.name
    meta = info(dataset)
    train, test = load_dataset(dataset, args.data_root, "train"), load_dataset(dataset, args.data_root, "test")
    judge = train_judge(train.x, train.y, args.judge_model, meta.num_classes, args.judge_epochs)
    judged = (predict(judge, test.x) == test.y).float().mean().item()
    print(f"judge: {args.judge_model}, {args.judge_epochs} epochs on {len(train.y)} {dataset} images, "
          f"test accuracy {judged:.2%}")  # fmt: skip
    counts = {k: row for k, row in enumerate(partition["counts"])}
    classes = {k: [c for c, n in enumerate(row) if n] for k, row in counts.items()}
    for stage in args.stages:
        generators = stage_generators(stage)
        print(f"{stage}: {len(generators)} of {partition['num_clients']} clients trained")
        rows = fidelity_rows(
            generators, classes, judge, meta.num_classes, meta.channels, meta.size, meta.mean, meta.std, args.per_class
        )
        for k in generators:
            own = [r for r in rows if r["client"] == k]
            weighted = sum(r["fidelity"] * counts[k][r["label"]] for r in own) / sum(counts[k][r["label"]] for r in own)
            g = generators[k]
            per_class = ", ".join(
                f"{r['label']}: {r['fidelity']:.1%}, mostly {r['judged_as']} ({r['judged_as_share']:.0%})" for r in own
            )
            print(f"  client {k} ({g['steps']} steps, ε = {g['epsilon']:.2f}, {g['settings']['generator_loss']} "
                  f"loss): {weighted:.1%} judged as their label  [{per_class}]")  # fmt: skip


if __name__ == "__main__":
    main()
