"""The round loop: client sampling, local training, aggregation, evaluation, checkpoint and resume.

Determinism: every random choice draws from a stream derived from (seed, purpose, round, client), so a run is
bit-identical on the same machine whether it ran through or was resumed from a checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from fed.algorithms.base import Algorithm, State
from fed.config import FLConfig
from fed.data.datasets import TensorDataset
from fed.metrics import group_accuracy, per_class_accuracy, variance
from fed.models import build_model


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class Engine:
    def __init__(
        self,
        cfg: FLConfig,
        algorithm: Algorithm,
        train: TensorDataset,
        test: TensorDataset,
        partition: dict,
        seed: int,
        work_dir: str | Path | None = None,
        progress: TextIO | None = sys.stderr,
        label: str = "",
        warm_start: str | Path | None = None,
    ):
        self.cfg, self.algorithm, self.seed, self.label = cfg, algorithm, seed, label
        self.device = resolve_device(cfg.device)
        self.memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        self.train = TensorDataset(train.x.to(self.device, memory_format=self.memory_format),
                                   train.y.to(self.device), train.num_classes)
        self.test = TensorDataset(test.x.to(self.device), test.y.to(self.device), test.num_classes)
        self.num_classes = train.num_classes
        clients = partition["clients"]
        self.num_clients = len(clients)
        self.train_idx = {k: torch.as_tensor(c["train"], dtype=torch.long) for k, c in enumerate(clients)}
        test_idx = [torch.as_tensor(c["test"], dtype=torch.long) for c in clients]
        self.local_test_idx = torch.cat(test_idx)
        self.local_test_group = np.repeat(np.arange(self.num_clients), [len(t) for t in test_idx])
        self.work_dir = Path(work_dir) if work_dir else None
        self.warm_start = Path(warm_start) if warm_start else None
        self.progress = progress

        torch.manual_seed(self.seed_int("init"))
        c, h = train.x.shape[1], train.x.shape[2]
        self.model = build_model(cfg.model, c, self.num_classes, h).to(self.device, memory_format=self.memory_format)
        self.global_state: State = self.state_copy(self.model)
        self.client_store: dict[int, dict[str, Any]] = {}
        self.history: list[dict[str, float]] = []
        self.round = 0
        self.round_metrics: dict[str, float] = {}
        self.diverged_round: int | None = None
        self._prefix_fp: str | None = None

    # ------------------------------------------------------------------ randomness
    def seed_int(self, purpose: str, *keys: int) -> int:
        """A 63-bit seed for (run seed, purpose, keys); purposes are hashed so new ones need no registry."""
        ss = np.random.SeedSequence([self.seed, zlib.crc32(purpose.encode()), *[k % 2**32 for k in keys]])
        return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))

    def rng(self, purpose: str, *keys: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed_int(purpose, *keys))

    def np_rng(self, purpose: str, *keys: int) -> np.random.Generator:
        return np.random.default_rng(self.seed_int(purpose, *keys))

    def sample_clients(self) -> list[int]:
        m = max(1, int(round(self.cfg.fraction * self.num_clients)))
        return sorted(self.np_rng("sample", self.round).choice(self.num_clients, m, replace=False).tolist())

    # ------------------------------------------------------------------ data and training helpers
    def client_train_data(self, client: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = self.train_idx[client].to(self.device)
        return self.train.x[idx], self.train.y[idx]

    def add_pooled_client(self, client: int) -> None:
        """Register a client that holds every client's training data (centralized training)."""
        self.train_idx[client] = torch.cat([self.train_idx[k] for k in range(self.num_clients)])

    def state_copy(self, model: nn.Module) -> State:
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    def local_sgd(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        generator: torch.Generator,
        epochs: int | None = None,
        lr: float | None = None,
    ) -> float:
        """Mini-batch SGD (the preset's optimiser settings); returns the mean training loss over all steps."""
        cfg = self.cfg
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr if lr is None else lr, momentum=cfg.momentum,
                              weight_decay=cfg.weight_decay)
        model.train()
        total = torch.zeros((), device=self.device)
        seen = 0
        for _ in range(cfg.local_epochs if epochs is None else epochs):
            for idx in torch.randperm(len(y), generator=generator).to(self.device).split(cfg.batch_size):
                xb = x[idx].contiguous(memory_format=self.memory_format)
                loss = loss_fn(xb, y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += loss.detach() * len(idx)
                seen += len(idx)
        return float(total) / max(seen, 1)

    @torch.inference_mode()
    def predict(self, model: nn.Module, x: torch.Tensor, batch: int = 1000) -> torch.Tensor:
        model.eval()
        return torch.cat([model(xb.contiguous(memory_format=self.memory_format)).argmax(1) for xb in x.split(batch)])

    @torch.inference_mode()
    def loss_of_state(self, state: State, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> float:
        """Mean cross-entropy of ``state`` on (x, y), BN in eval mode (e.g. q-FFL's F_k at the global model)."""
        self.model.load_state_dict(state)
        self.model.eval()
        total = sum(F.cross_entropy(self.model(xb.contiguous(memory_format=self.memory_format)), yb,
                                    reduction="sum").item() for xb, yb in zip(x.split(batch), y.split(batch)))
        return total / max(len(y), 1)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict[str, Any]:
        """Global model on the external test set (accuracy, per-class accuracy, class-level variance) and on
        every client's local test split (mean local accuracy, client-level variance)."""
        self.model.load_state_dict(self.global_state)
        pred = self.predict(self.model, self.test.x).cpu().numpy()
        y = self.test.y.cpu().numpy()
        per_class = per_class_accuracy(pred, y, self.num_classes)
        local_pred = self.predict(self.model, self.train.x[self.local_test_idx.to(self.device)]).cpu().numpy()
        local_y = self.train.y[self.local_test_idx.to(self.device)].cpu().numpy()
        local = group_accuracy(local_pred, local_y, self.local_test_group, self.num_clients)
        return {
            "global_acc": float(100.0 * (pred == y).mean()),
            "class_acc_variance": variance(per_class),
            "local_acc_mean": float(np.nanmean(local)) if np.isfinite(local).any() else math.nan,
            "client_acc_variance": variance(local),
            "per_class_acc": per_class.tolist(),
            "local_acc": local.tolist(),
        }

    # ------------------------------------------------------------------ checkpoints
    # Settings that do not change the training trajectory (what is evaluated or saved, and for how long).
    TRAJECTORY_NEUTRAL = ("rounds", "eval_every", "checkpoint_every", "report", "reduction", "device")

    def prefix_fingerprint(self) -> str:
        """Identity of the training trajectory shared by every method that is FedAvg up to some round.
        Computed once, on first use — after ``setup``, which may add clients (centralized)."""
        if self._prefix_fp is None:
            cfg = {k: v for k, v in self.cfg.to_dict().items() if k not in self.TRAJECTORY_NEUTRAL}
            self._prefix_fp = _digest([cfg, self.seed, [t.tolist() for t in self.train_idx.values()]])
        return self._prefix_fp

    def fingerprint(self) -> str:
        """Identity of the run's inputs; a checkpoint of other inputs is not resumed."""
        return _digest([self.prefix_fingerprint(), self.cfg.rounds, type(self.algorithm).__name__,
                        vars(self.algorithm)])

    @property
    def checkpoint_path(self) -> Path | None:
        return self.work_dir / "checkpoint.pt" if self.work_dir else None

    def save_checkpoint(self) -> None:
        if not self.checkpoint_path:
            return
        self.work_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.checkpoint_path.with_suffix(".tmp")
        torch.save({"fingerprint": self.fingerprint(), "prefix_fingerprint": self.prefix_fingerprint(),
                    "round": self.round, "global_state": self.global_state,
                    "client_store": self.client_store, "algorithm": self.algorithm.state_dict(),
                    "history": self.history}, tmp)
        os.replace(tmp, self.checkpoint_path)  # atomic: a kill never leaves a torn checkpoint

    def try_resume(self) -> bool:
        path = self.checkpoint_path
        if not path or not path.exists():
            return False
        ckpt = torch.load(path, weights_only=True, map_location=self.device)
        if ckpt["fingerprint"] != self.fingerprint():
            self._log(f"ignoring checkpoint {path}: it belongs to other settings")
            return False
        self._load(ckpt)
        self.algorithm.load_state_dict(ckpt["algorithm"])
        self._log(f"resumed from {path} at round {self.round}")
        return True

    def load_warm_start(self) -> None:
        """Continue from a FedAvg checkpoint at round r - 1 (start-round ablations): valid when the method is
        FedAvg up to that round and the trajectory settings, seed and partition are the same."""
        ckpt = torch.load(self.warm_start, weights_only=True, map_location=self.device)
        until = self.algorithm.fedavg_until
        if ckpt["prefix_fingerprint"] != self.prefix_fingerprint():
            raise ValueError(f"warm start {self.warm_start}: other settings, seed or partition than this run")
        if ckpt["round"] >= until or ckpt["round"] >= self.cfg.rounds:
            raise ValueError(f"warm start {self.warm_start} at round {ckpt['round']} does not precede round "
                             f"{until}, where {type(self.algorithm).__name__} stops being FedAvg")
        self._load(ckpt)
        self._log(f"warm-started from {self.warm_start} at round {self.round}")

    def _load(self, ckpt: dict) -> None:
        self.round, self.global_state = ckpt["round"], ckpt["global_state"]
        self.client_store, self.history = ckpt["client_store"], ckpt["history"]

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        started = time.perf_counter()
        self.algorithm.setup(self)  # deterministic; re-run on resume, expensive products are cached by rules
        if not self.try_resume() and self.warm_start:
            self.load_warm_start()
        bar = tqdm(total=cfg.rounds, initial=self.round, desc=self.label or "rounds", unit="round",
                   file=self.progress, disable=self.progress is None, mininterval=1.0, dynamic_ncols=True)
        while self.round < cfg.rounds:
            self.round += 1
            t0 = time.perf_counter()
            self.round_metrics: dict[str, float] = {}  # what a method reports about this round (cost, sharing)
            results = []
            for client in self.algorithm.select_clients(self):
                torch.manual_seed(self.seed_int("client", self.round, client))  # for methods using global RNG
                results.append(self.algorithm.client_update(self, client))
            self.model.load_state_dict(self.algorithm.aggregate(self, results))
            self.algorithm.server_update(self, self.model, results)
            self.global_state = self.state_copy(self.model)
            n = sum(r.num_samples for r in results)
            row: dict[str, Any] = {"round": self.round,
                                   "train_loss": sum(r.train_loss * r.num_samples for r in results) / max(n, 1),
                                   **self.round_metrics}
            diverged = not math.isfinite(row["train_loss"]) or not all(
                torch.isfinite(v).all() for v in self.global_state.values() if v.is_floating_point())
            if diverged or self.round % cfg.eval_every == 0 or self.round == cfg.rounds:
                row.update(self.evaluate())
            row["seconds"] = time.perf_counter() - t0
            self.history.append(row)
            bar.update(1)
            if "global_acc" in row:
                bar.set_postfix(acc=f"{row['global_acc']:.2f}", loss=f"{row['train_loss']:.3f}")
            if diverged:
                self.diverged_round = self.round
                self._log(f"diverged at round {self.round} (non-finite loss or weights); stopping this run")
                break
            if self.round % cfg.checkpoint_every == 0 or self.round == cfg.rounds:
                self.save_checkpoint()
        bar.close()
        return self.summary(time.perf_counter() - started)

    def summary(self, wall_seconds: float) -> dict[str, Any]:
        evaluated = [r for r in self.history if "global_acc" in r]
        last = evaluated[-1] if evaluated else {}
        if self.diverged_round is not None:
            last = {k: math.nan for k in ("global_acc", "class_acc_variance", "local_acc_mean",
                                          "client_acc_variance")} | {"round": self.diverged_round}
        finite = [r for r in evaluated if math.isfinite(r["global_acc"])]
        best = max(finite, key=lambda r: r["global_acc"]) if finite else {}
        return {"diverged": self.diverged_round is not None, "diverged_round": self.diverged_round,
                "rounds_completed": self.round, "last": last, "best": best, "history": self.history,
                "wall_seconds": wall_seconds, "device": str(self.device)}

    def _log(self, msg: str) -> None:
        if self.progress is not None:
            tqdm.write(f"[{self.label}] {msg}", file=self.progress)
