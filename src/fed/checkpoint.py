"""Checkpoints, run identity and warm starts.

A checkpoint is resumed only by a run of the same identity: resolved settings, seed, partition, the data's
content, the code the run executes (``fed.identity``: a content hash, so an edited method never resumes stale
state), the number of torch threads and the device kind. Writes are atomic and the previous checkpoint is kept, so an
unreadable file falls back to the one before it (or a fresh start), with a warning naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


class OutOfTime(Exception):
    """A run or stage reached its ``stop_at`` before its end; its checkpoint holds where it stopped."""


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def tensor_hash(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def save(path: Path, payload: dict[str, Any]) -> None:
    """Atomic write; the previous checkpoint becomes ``<name>.prev.pt``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    if path.exists():
        os.replace(path, previous(path))
    os.replace(tmp, path)  # a kill never leaves a torn checkpoint


def previous(path: Path) -> Path:
    return path.with_name(path.stem + ".prev.pt")


def load(path: Path, device: torch.device | str, warn: Callable[[str], None]) -> dict[str, Any] | None:
    """The newest readable checkpoint at ``path`` (or its predecessor); None if there is none."""
    found = newest(path, device, warn)
    return found[1] if found else None


def newest(path: Path, device: torch.device | str, warn: Callable[[str], None]) -> tuple[Path, dict[str, Any]] | None:
    """``load``, with the file it read: ``path`` or, where that is unreadable, its predecessor."""
    for candidate in (path, previous(path)):
        if not candidate.exists():
            continue
        try:
            return candidate, torch.load(candidate, weights_only=True, map_location=device)
        except Exception as err:
            warn(f"checkpoint {candidate} is unreadable ({type(err).__name__}: {err}); trying an earlier one")
    return None


def load_file(path: str | Path, device: torch.device | str, what: str) -> dict[str, Any]:
    """A checkpoint that must exist and be readable (a warm start, a stage output): errors name file and fix."""
    try:
        return torch.load(path, weights_only=True, map_location=device)
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path} does not exist; run the rule that produces it") from None
    except Exception as err:
        raise RuntimeError(
            f"{what} {path} is unreadable ({type(err).__name__}: {err}); delete it and rerun, Snakemake recomputes it"
        ) from err
