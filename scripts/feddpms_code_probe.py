"""Do details of FedDPMS' authors' code explain their slow first rounds (66.6 % after round 1 at β = 0.5 on their
FMNIST curve, ours 81.65 %)? A probe, not a cell: ``fed run`` with the engine unchanged and one or both details of
the authors' code (docs/deviations.md, FedDPMS) put in, so its rounds sit beside the committed cell's.

- ``--data-parallel 4``: train.py wraps the model in ``nn.DataParallel(device_ids=[4, 5, 6, 7])``. In training each
  batch is scattered into four chunks (``Tensor.chunk``: 16 + 16 + 16 + 16 of B = 64), each normalised by its own
  statistics, and only the first replica's running statistics survive (its buffers are the module's; the other
  replicas' updates are lost). Registered as model ``cnn_dpms_fmnist_dp4``.
- ``--normalise-half``: sampling.py's ``Normalize(0.5, 0.5)`` for FMNIST in place of its mean and std.

    python -m fed partition fmnist dirichlet --clients 10 --seed 0 --param beta=0.5 --param local_test_fraction=0 \\
        -o partitions/checks/fmnist_dir0.5.json
    python scripts/feddpms_code_probe.py --data-parallel 4 fmnist partitions/checks/fmnist_dir0.5.json fedavg \\
        --preset feddpms --set rounds=2 --threads 2 -o results/checks/feddpms_dp4

The other arguments are ``fed run``'s; the script adds ``--set vectorise=false`` (the loop: ``torch.func``'s batched
clients would not see the chunks).
"""

from __future__ import annotations

import argparse
import dataclasses

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--data-parallel", type=int, default=1, metavar="GPUS", help="BatchNorm over GPUS chunks")
    parser.add_argument("--normalise-half", action="store_true", help="FMNIST inputs as Normalize(0.5, 0.5)")
    probe, run = parser.parse_known_args()
    extra = ["--set", "vectorise=false"]
    if probe.data_parallel > 1:
        name = f"cnn_dpms_fmnist_dp{probe.data_parallel}"
        MODELS[name] = lambda **kw: with_chunked_batch_norm(MODELS["cnn_dpms_fmnist"](**kw), probe.data_parallel)
        extra += ["--set", f"model={name}"]
    if probe.normalise_half:
        datasets.DATASETS["fmnist"] = dataclasses.replace(datasets.DATASETS["fmnist"], mean=(0.5,), std=(0.5,))
    cli.main(["run", *run, *extra])


if __name__ == "__main__":
    main()
