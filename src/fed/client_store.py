"""Per-client persistent state (SCAFFOLD's c_i, MOON's previous model, …) on disk, one file per client and round.

A 1,000-client run holds only the sampled clients' state in memory. Files are versioned by the round that wrote
them, so a run resumed from its checkpoint at round r reads the state as of round r even if a killed attempt had
already written later rounds; at each checkpoint every client keeps only its newest version.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

_FILE = re.compile(r"r(\d+)\.pt$")


class ClientStore:
    def __init__(self, root: str | Path | None):
        """``root=None`` keeps the state in memory (tests, runs without a work directory)."""
        self.root = Path(root) if root else None
        self._memory: dict[int, dict[int, dict[str, Any]]] = {}

    def _versions(self, client: int) -> dict[int, Path | dict]:
        if self.root is None:
            return dict(self._memory.get(client, {}))
        folder = self.root / str(client)
        if not folder.is_dir():
            return {}
        return {int(m[1]): p for p in folder.iterdir() if (m := _FILE.search(p.name))}

    def load(self, client: int, before_round: int, device: torch.device | str = "cpu") -> dict[str, Any]:
        """The client's state as written by its latest participation before ``before_round`` ({} if none)."""
        versions = {r: v for r, v in self._versions(client).items() if r < before_round}
        if not versions:
            return {}
        latest = versions[max(versions)]
        if isinstance(latest, dict):
            return _clone(latest)
        try:
            return torch.load(latest, weights_only=True, map_location=device)
        except Exception as err:  # a torn file cannot happen (atomic writes); a corrupted disk can
            raise RuntimeError(
                f"client state {latest} is unreadable ({err}); delete the run's work directory to restart the run"
            ) from err

    def save(self, client: int, round_: int, state: dict[str, Any]) -> None:
        if self.root is None:  # a copy, as a file would hold: the caller's tensors change in later rounds
            self._memory.setdefault(client, {})[round_] = _clone(state)
            return
        folder = self.root / str(client)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"r{round_}.tmp"
        torch.save(state, tmp)
        os.replace(tmp, folder / f"r{round_}.pt")  # atomic

    def commit(self, keep_from: int) -> None:
        """Called with each checkpoint: a resume can start from any checkpoint at round >= ``keep_from``, so
        every client keeps its versions after ``keep_from`` and the newest one at or before it."""
        clients = (
            self._memory
            if self.root is None
            else ([int(p.name) for p in self.root.iterdir() if p.is_dir()] if self.root.is_dir() else [])
        )
        for client in list(clients):
            versions = self._versions(client)
            old = sorted(r for r in versions if r <= keep_from)
            for r in old[:-1]:
                if self.root is None:
                    del self._memory[client][r]
                else:
                    versions[r].unlink(missing_ok=True)

    def num_clients_with_state(self) -> int:
        if self.root is None:
            return len(self._memory)
        return sum(1 for p in self.root.iterdir() if p.is_dir()) if self.root.is_dir() else 0


def _clone(value: Any) -> Any:
    """A copy of tensors nested in dicts, lists and tuples (a state dict inside a client's state)."""
    if torch.is_tensor(value):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value
