"""Do details of FedDPMS' authors' code explain their slow first rounds (66.6 % after round 1 at β = 0.5 on their
FMNIST curve, ours 81.65 %)? A probe, not a cell: ``fed run`` with the engine unchanged and one or both details of
the authors' code (docs/deviations.md, FedDPMS) put in, so its rounds sit beside the committed cell's.

- ``--data-parallel 4``: train.py wraps the model in ``nn.DataParallel(device_ids=[4, 5, 6, 7])``. In training each
  batch is scattered into four chunks (``Tensor.chunk``: 16 + 16 + 16 + 16 of B = 64), each normalised by its own
  statistics, and only the first replica's running statistics survive (its buffers are the module's; the other
  replicas' updates are lost). Registered as model ``cnn_dpms_fmnist_dp4``.
- ``--normalise-half``: sampling.py's ``Normalize(0.5, 0.5)`` for FMNIST in place of its mean and std.
- ``--bootstrap SEED``: the scripts' ``--mini 1``: ``LocalDataloaders_sample`` (sampling.py) draws each client's
  ``n`` samples with replacement from its own ``n`` (``np.random.choice(range(n), n)``, ≈ 63 % of them distinct), once
  before round 1 for every method but FedDPMS' Stage II. The probe writes that resample of PARTITION beside it
  (``…_bootstrapSEED.json``, drawn by ``np.random.default_rng(SEED)``) and runs on it.
- ``--authors-data SEED``: the very samples the scripts' FedAvg trains on at ``--seed SEED`` (2 in every script):
  sampling.py's ``partition_data_FMNIST`` (NumPy's global generator seeded by SEED, ``K = 100`` classes drawn of
  which 90 are empty, each client's list shuffled) and the ``--mini 1`` resample that follows it in train.py from
  the same stream, on PARTITION's β and client count (``…_authorsSEED.json``; FMNIST's labels in its files' order,
  as torchvision reads them). Checked against sampling.py itself (dd16e44: its two functions run with torchvision's
  FashionMNIST replaced by these labels): the same clients and draws at β = 0.1 and 0.5, 2026-12-04.
- ``--double-logits``: Localupdate.py's ``p = model(X).double()``: the cross-entropy and its gradient in float64, the
  network in float32 (a forward hook on the model).
- ``--float64``: train.py's ``torch.set_default_dtype(torch.float64)`` (before it builds the model; torchvision's
  ``ToTensor`` then yields float64 images too): weights, optimiser state and averaging in float64, the inputs cast
  to it as they enter the model (normalised in float32 first).

A changed model is registered under a name that says how (``cnn_dpms_fmnist_dp4``, ``…_logits64``, ``…_float64``).

    python -m fed partition fmnist dirichlet --clients 10 --seed 0 --param beta=0.5 --param local_test_fraction=0 \\
        -o partitions/checks/fmnist_dir0.5.json
    python scripts/feddpms_code_probe.py --data-parallel 4 fmnist partitions/checks/fmnist_dir0.5.json fedavg \\
        --preset feddpms --set rounds=2 --threads 2 -o results/checks/feddpms_dp4

The other arguments are ``fed run``'s (``DATASET PARTITION METHOD`` first); the script adds ``--set vectorise=false``
(the loop: ``torch.func``'s batched clients would not see the chunks).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fed import cli
from fed.data import datasets
from fed.models import MODELS


class ChunkedBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d as ``nn.DataParallel`` over ``devices`` GPUs trains it; evaluation is plain BatchNorm."""

    devices = 4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(x)
        first, *rest = x.chunk(self.devices)  # DataParallel's scatter
        return torch.cat(
            [
                super().forward(first),  # replica 0: the module's own buffers, updated
                *(F.batch_norm(c, None, None, self.weight, self.bias, True, 0.0, self.eps) for c in rest),
            ]
        )


def with_chunked_batch_norm(model: nn.Module, devices: int) -> nn.Module:
    chunked = type(f"ChunkedBatchNorm2d{devices}", (ChunkedBatchNorm2d,), {"devices": devices})
    for m in model.modules():
        if type(m) is nn.BatchNorm2d:
            m.__class__ = chunked
    return model


def bootstrap(partition: dict, seed: int) -> dict:
    """Each client's training indices drawn with replacement from its own, as many as it holds (``--mini 1``)."""
    rng = np.random.default_rng(seed)
    clients = [
        {**c, "train": [c["train"][j] for j in rng.choice(len(c["train"]), len(c["train"]))]}
        for c in partition["clients"]
    ]
    return {**partition, "clients": clients, "bootstrap": seed}


def authors_data(labels: np.ndarray, n_users: int, alpha: float, seed: int) -> tuple[list[list[int]], list[list[int]]]:
    """The authors' FMNIST clients at ``--seed seed``: each client's indices (partition_data_FMNIST) and the bootstrap
    its loader draws from them (LocalDataloaders_sample, mini = 1), in the order of their code's calls."""
    np.random.seed(seed)
    n, min_size = len(labels), 0
    while min_size < 10:
        parts = [[] for _ in range(n_users)]
        for k in range(100):  # the code's K = 100 (CIFAR-100's), for FMNIST's 10 classes
            idx_k = np.where(labels == k)[0]
            np.random.shuffle(idx_k)
            p = np.random.dirichlet(np.repeat(alpha, n_users))
            p = np.array([q * (len(part) < n / n_users) for q, part in zip(p, parts)])
            p = p / p.sum()
            cuts = (np.cumsum(p) * len(idx_k)).astype(int)[:-1]
            parts = [part + chunk.tolist() for part, chunk in zip(parts, np.split(idx_k, cuts))]
            min_size = min(len(part) for part in parts)
    for part in parts:
        np.random.shuffle(part)
    draws = [[part[j] for j in np.random.choice(range(len(part)), len(part))] for part in parts]
    return parts, draws


def with_double_logits(model: nn.Module) -> nn.Module:
    model.register_forward_hook(lambda _module, _inputs, logits: logits.double())
    return model


def with_double_inputs(model: nn.Module) -> nn.Module:
    model.register_forward_pre_hook(lambda _module, inputs: (inputs[0].double(), *inputs[1:]))
    return model


def resampled_partition(
    parser: argparse.ArgumentParser, run: list[str], bootstrap_seed: int | None, authors_seed: int | None
) -> Path:
    """Write the partition ``--bootstrap`` or ``--authors-data`` trains on beside ``fed run``'s PARTITION; its path."""
    source = Path(run[1]) if len(run) > 2 else None
    if source is None or source.suffix != ".json" or not source.is_file():
        parser.error(f"fed run's second argument must be a partition file, got {run[1:2]}")
    if bootstrap_seed is not None and authors_seed is not None:
        parser.error("--authors-data already holds the authors' resample: give it alone")
    partition = json.loads(source.read_text())
    if bootstrap_seed is not None:
        out = source.with_name(f"{source.stem}_bootstrap{bootstrap_seed}.json")
        out.write_text(json.dumps(bootstrap(partition, bootstrap_seed)))
        return out
    if run[0] != "fmnist" or partition.get("scheme") != "dirichlet":
        parser.error("--authors-data: the authors' FMNIST Dirichlet partition (dataset fmnist, a dirichlet file)")
    labels = datasets.load_labels("fmnist", run[run.index("--root") + 1] if "--root" in run else "data")
    _, draws = authors_data(labels, partition["num_clients"], partition["params"]["beta"], authors_seed)
    clients = [{"train": d, "test": []} for d in draws]
    counts = [np.bincount(labels[d], minlength=10).tolist() for d in draws]
    out = source.with_name(f"{source.stem}_authors{authors_seed}.json")
    out.write_text(json.dumps({**partition, "clients": clients, "counts": counts, "authors_seed": authors_seed}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--data-parallel", type=int, default=1, metavar="GPUS", help="BatchNorm over GPUS chunks")
    parser.add_argument("--normalise-half", action="store_true", help="FMNIST inputs as Normalize(0.5, 0.5)")
    parser.add_argument("--bootstrap", type=int, metavar="SEED", help="each client's data resampled (--mini 1)")
    parser.add_argument("--authors-data", type=int, metavar="SEED", help="the scripts' clients at --seed SEED")
    parser.add_argument("--double-logits", action="store_true", help="the loss on float64 logits (model(X).double())")
    parser.add_argument("--float64", action="store_true", help="the whole network in float64 (set_default_dtype)")
    probe, run = parser.parse_known_args()
    if probe.bootstrap is not None or probe.authors_data is not None:
        run[1] = str(resampled_partition(parser, run, probe.bootstrap, probe.authors_data))
    extra = ["--set", "vectorise=false"]
    name, build = "cnn_dpms_fmnist", MODELS["cnn_dpms_fmnist"]
    if probe.data_parallel > 1:
        name += f"_dp{probe.data_parallel}"
        build = lambda build=build, **kw: with_chunked_batch_norm(build(**kw), probe.data_parallel)  # noqa: E731
    if probe.double_logits:
        name += "_logits64"
        build = lambda build=build, **kw: with_double_logits(build(**kw))  # noqa: E731
    if probe.float64:
        torch.set_default_dtype(torch.float64)
        name += "_float64"
        build = lambda build=build, **kw: with_double_inputs(build(**kw))  # noqa: E731
    if name != "cnn_dpms_fmnist":
        MODELS[name] = build
        extra += ["--set", f"model={name}"]
    if probe.normalise_half:
        datasets.DATASETS["fmnist"] = dataclasses.replace(datasets.DATASETS["fmnist"], mean=(0.5,), std=(0.5,))
    cli.main(["run", *run, *extra])


if __name__ == "__main__":
    main()
