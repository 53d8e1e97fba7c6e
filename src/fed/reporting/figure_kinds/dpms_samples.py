"""Synthetic images from noisy means of data representations (FedDPMS slides, FMNIST / CIFAR-10 / CIFAR-100): the
noisy class means a FedDPMS cell's donors shared (kept in its history, ``dpms_examples``), decoded by the cell's global
decoder D̄; one row per class, one panel per dataset."""

from __future__ import annotations

import json

import pandas as pd

from fed.reporting.figure_kinds.common import STR, cell

NEEDS_MODELS = True

PER_DATASET = {"oneOf": [STR, {"type": "object", "additionalProperties": STR}], "description": "or dataset ->"}
KEYS = {"preset": (True, STR), "partition": (True, PER_DATASET), "method": (True, PER_DATASET)}


def of(fig, key, dataset):
    """A key given once or per dataset (CIFAR-10's partitions are the code's 40 % subsamples)."""
    if isinstance(fig[key], str):
        return fig[key]
    if dataset not in fig[key]:
        raise ValueError(f"{fig.get('output', 'dpms_samples')}: {key} names no value for dataset {dataset!r}")
    return fig[key][dataset]


def cells(fig):
    return [
        cell(fig["preset"], d, of(fig, "partition", d), of(fig, "method", d), fig["seeds"][0]) for d in fig["datasets"]
    ]


def decode_examples(metrics_path, model_path):
    """The shared noisy means of a FedDPMS cell and D̄'s images of them, de-normalised to [0, 1]:
    (images (N, C, H, W), labels (N,), record)."""
    import torch

    from fed.data.datasets import info
    from fed.models import build_model
    from fed.models.vae import vae_modules

    record = json.loads(open(metrics_path).read())
    examples = next((r["dpms_examples"] for r in record["history"] if "dpms_examples" in r), None)
    if not examples:
        raise ValueError(f"{metrics_path}: no shared noisy means in its history (not a FedDPMS cell past Stage I)")
    meta = info(record["dataset"])
    model = build_model(record["config"]["model"], meta.channels, meta.num_classes, meta.size)
    decoder = vae_modules(model, (meta.channels, meta.size, meta.size))["decoder"]
    state = torch.load(model_path, weights_only=True, map_location="cpu")
    decoder.load_state_dict({k.removeprefix("extras.decoder."): v for k, v in state.items() if "extras.decoder." in k})
    z = torch.tensor([v for c in sorted(examples, key=int) for v in examples[c]])
    labels = torch.tensor([int(c) for c in sorted(examples, key=int) for _ in examples[c]])
    with torch.no_grad():
        x = decoder.eval()(z)
    x = x * torch.tensor(meta.std).view(1, -1, 1, 1) + torch.tensor(meta.mean).view(1, -1, 1, 1)
    return x.clamp(0, 1), labels, record


def draw(fig, cells, files, stages, png, csv, caption):
    import torch

    from fed.reporting.figures import plot_image_grids, tile

    panels, rows = {}, []
    for c, (metrics, model) in zip(cells, files):
        x, labels, record = decode_examples(metrics, model)
        per_class = max(int((labels == k).sum()) for k in labels.unique())
        grid = []
        for k in labels.unique():  # one row per class, padded with blanks to the longest row
            row = x[labels == k]
            grid.append(torch.cat([row, torch.ones(per_class - len(row), *row.shape[1:])]))
            rows.append({"dataset": c["dataset"], "class": int(k), "noisy_means_shown": len(row)})
        ledger = record["shared"]
        eps = {k: v if isinstance(v, str) else f"{v:.3g}" for k, v in ledger.items() if k.startswith("epsilon_exact")}
        label = f"{c['dataset']}: σ = {ledger['noise_multiplier']:g}, exact ε = {eps['epsilon_exact']} "
        panels[label + f"(one release: {eps['epsilon_exact_per_release']})"] = tile(torch.cat(grid), nrow=per_class)
    pd.DataFrame(rows).to_csv(csv, index=False)
    plot_image_grids(panels, png, caption)
