"""Which device a run uses and how CUDA computes on it: deterministic kernels and full float32 unless a preset asks
for CUDA's fastest kernels (``FLConfig.deterministic``). Below the engine, so that DA-FL's GAN clients, each in a
process of its own, set CUDA as a cell does."""

from __future__ import annotations

import os

import torch


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def reproducible_cuda(deterministic: bool = True) -> None:
    """On a GPU, the same seed gives the same numbers and a resumed run equals an uninterrupted one, as on the CPU:
    deterministic kernels (cuDNN, cuBLAS with a fixed workspace, deterministic scatter/index ops; the few ops without
    one, e.g. adaptive average pooling's backward, warn) and full float32 (no TF32, which rounds convolutions and
    products to 10-bit mantissas). Costs speed (DA-FL's batched round on an H200: 3.09 s against 1.51 s with both
    off); reproduction first. ``deterministic=False`` (the preset's ``deterministic: false``) lets cuDNN choose its
    fastest kernels, deterministic or not; float32 stays full."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts
    torch.use_deterministic_algorithms(deterministic, warn_only=True)  # ops with no deterministic kernel warn, run
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = deterministic, not deterministic
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
