"""How faithful a DA-FL client's DP-CGAN is to the labels it draws for: the share of its samples G(z, y) that a
judge — a classifier trained centrally on the real training set — assigns to y, per client and class (a
classification accuracy score). Read after training, outside every run's identity.

The samples are taken exactly as DA-FL shares them (``fed.dpgan.generate``, then ``from_gan_space`` to the data's size
and normalisation). The judge's accuracy on a class's real test images is the reference for that class's samples (a
generator of prototypical images can score above it); 1/L is what a judge guessing at random scores. A generator whose
discriminator won from the start (a saturating loss with D(G(z)) ≈ 0 gives it almost no gradient) can score low on its
own classes (docs/results/dafl.md: 4 of 10 at 1-Label)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from fed.dpgan import PSGSettings, from_gan_space, generate
from fed.models import build_model
from fed.training import SGDSettings, local_sgd, predict


def stage_generators(path: str | Path) -> dict[int, dict[str, Any]]:
    """Client → its PSG record (``generator``, ``steps``, ``epsilon``, ``settings`` …) from a ``dp_cgan`` stage's
    output file, or from a stage's work directory while it trains (its finished ``client{k}.pt`` files)."""
    path = Path(path)
    if path.is_dir():
        files = {int(p.stem.removeprefix("client")): p for p in path.glob("client*.pt") if p.stem[6:].isdigit()}
        return {k: torch.load(files[k], weights_only=False, map_location="cpu") for k in sorted(files)}
    record = torch.load(path, weights_only=False, map_location="cpu")
    return {k: {**c, "settings": record["settings"]} for k, c in enumerate(record["clients"])}


def label_fidelity(judge: nn.Module, samples: torch.Tensor, label: int) -> tuple[float, int, float]:
    """The share of ``samples`` that ``judge`` assigns to ``label``, and the class it assigns most of them to with
    that class's share."""
    if not len(samples):
        return float("nan"), -1, float("nan")
    judged = predict(judge, samples)
    modal = int(judged.mode().values)
    return (judged == label).float().mean().item(), modal, (judged == modal).float().mean().item()


def train_judge(
    x: torch.Tensor, y: torch.Tensor, model: str, num_classes: int, epochs: int = 2, seed: int = 0
) -> nn.Module:
    """A classifier trained centrally on (x, y): SGD lr 0.01, momentum 0.9, batches of 64, ``epochs`` passes."""
    torch.manual_seed(seed)
    judge = build_model(model, x.shape[1], num_classes, x.shape[2])
    settings = SGDSettings(lr=0.01, momentum=0.9, batch_size=64, epochs=epochs)
    loss = lambda a, b: nn.functional.cross_entropy(judge(a), b)  # noqa: E731
    local_sgd(judge, x, y, loss, torch.Generator().manual_seed(seed), settings)
    return judge.eval()


def fidelity_rows(
    generators: dict[int, dict[str, Any]],
    classes: dict[int, list[int]],
    judge: nn.Module,
    num_classes: int,
    channels: int,
    size: int,
    mean,
    std,
    per_class: int = 500,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per (client, class it holds): ``per_class`` samples of its generator at that class, and the share the
    judge assigns to it. ``classes``: client → the classes of its training data."""
    rows = []
    for k, record in generators.items():
        settings = PSGSettings(**record["settings"])
        for c in classes[k]:
            labels = torch.full((per_class,), c, dtype=torch.long)
            g = generate(record["generator"], labels, num_classes, channels, settings, seed + 1000 * k + c)
            share, modal, modal_share = label_fidelity(judge, from_gan_space(g, mean, std, size), c)
            rows.append({"client": k, "label": c, "samples": per_class, "fidelity": share, "judged_as": modal,
                         "judged_as_share": modal_share})  # fmt: skip
    return rows
