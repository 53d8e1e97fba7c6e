"""What a method sees of a federated run: the narrow, documented context its hooks receive.

The engine owns the round loop; a method never sees it. Through :class:`Context` it gets

- the settings (``cfg``), the current ``round``, ``num_clients``, ``num_classes``, ``input_shape``, ``device``;
- client data: ``client_data(k)`` (local training split), ``pooled_data()`` (every client's, for centralized);
- the working model ``model`` and the round's ``global_state``; ``new_model()`` (the model factory),
  ``global_model()`` (a frozen copy of this round's global model: a teacher, a contrast anchor);
- local training: ``train(model, x, y, loss_fn, generator, after_step=None)`` → :class:`~fed.training.LocalStats`;
  ``loss_of(state, x, y)``;
- seeded random streams ``rng(purpose, *keys)`` / ``np_rng(...)`` — (run seed, purpose, keys) fix the stream, so
  resumed runs are bit-identical;
- per-client persistent state: ``load_client_state(k)`` / ``save_client_state(k, state)`` (on disk, part of resume);
- ``stages``: the files the run's preparatory stages produced (a GAN, a VAE, a prefix), by name;
- ``round_metrics``: what a method reports about the round (costs, how much was shared) — merged into the
  round's history row and MLflow;
- ``ledger``: what left the clients over the whole run (``share(kind, amount)``), the privacy ledger.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fed.client_store import ClientStore
from fed.config import FLConfig
from fed.data.datasets import TensorDataset
from fed.models import build_model, initialise
from fed.training import LocalStats, SGDSettings, State, local_sgd, mean_loss, state_copy


class Context:
    def __init__(
        self,
        cfg: FLConfig,
        train: TensorDataset,
        test: TensorDataset,
        partition: dict,
        seed: int,
        device: torch.device,
        client_store: ClientStore | None = None,
        stages: dict[str, Path] | None = None,
        extra_modules: Callable[[nn.Module, tuple], dict[str, nn.Module]] | None = None,
    ):
        self.cfg, self.seed, self.device = cfg, seed, device
        self.memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        self.train_set = TensorDataset(
            train.x.to(device, memory_format=self.memory_format), train.y.to(device), train.num_classes
        )
        self.test_set = TensorDataset(test.x.to(device), test.y.to(device), test.num_classes)
        self.num_classes = train.num_classes
        self.input_shape = tuple(train.x.shape[1:])
        clients = partition["clients"]
        self.num_clients = len(clients)
        self.train_idx = [torch.as_tensor(c["train"], dtype=torch.long) for c in clients]
        self.test_idx = [torch.as_tensor(c["test"], dtype=torch.long) for c in clients]
        self.clients = client_store or ClientStore(None)
        self.stages = dict(stages or {})
        self._extra_modules = extra_modules
        self.round = 0
        self.round_metrics: dict[str, Any] = {}
        self.ledger: dict[str, float] = {}
        torch.manual_seed(self.seed_int("init"))
        self.model = self.new_model()
        initialise(self.model, cfg.init, self.rng("init_weights"))  # "torch": as built; another scheme: its own stream
        self.global_state: State = state_copy(self.model)
        self._global_model: tuple[int, nn.Module] | None = None
        self.batched = None  # a fed.batched.BatchedRound, set by run_round while the round's clients train together

    # ---------------------------------------------------------------- random streams
    def seed_int(self, purpose: str, *keys: int) -> int:
        """A 63-bit seed for (run seed, purpose, keys); purposes are hashed, so new ones need no registry."""
        ss = np.random.SeedSequence([self.seed, zlib.crc32(purpose.encode()), *[k % 2**32 for k in keys]])
        return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))

    def rng(self, purpose: str, *keys: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed_int(purpose, *keys))

    def np_rng(self, purpose: str, *keys: int) -> np.random.Generator:
        return np.random.default_rng(self.seed_int(purpose, *keys))

    # ---------------------------------------------------------------- data
    def samples(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Training samples by dataset index (what ``train_idx`` holds per client)."""
        idx = idx.to(self.device)
        return self.train_set.x[idx], self.train_set.y[idx]

    def client_data(self, client: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.samples(self.train_idx[client])

    def pooled_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.samples(torch.cat(self.train_idx))

    def client_sizes(self) -> list[int]:
        return [len(i) for i in self.train_idx]

    # ---------------------------------------------------------------- models
    def new_model(self) -> nn.Module:
        """A fresh model of the run's architecture, on the run's device (initialised from torch's global RNG)."""
        c, h, w = self.input_shape
        model = build_model(self.cfg.model, c, self.num_classes, h, w)
        extras = self._extra_modules(model, self.input_shape) if self._extra_modules else {}
        if extras:  # trained and aggregated with the model (e.g. MOON's projection head)
            assert not hasattr(model, "extras"), "a model may not define its own 'extras'"
            model.extras = nn.ModuleDict(extras)
        return model.to(self.device, memory_format=self.memory_format)

    def global_model(self) -> nn.Module:
        """This round's global model, frozen and in eval mode (built once per round)."""
        if self._global_model is None or self._global_model[0] != self.round:
            model = self._global_model[1] if self._global_model else self.new_model()
            model.load_state_dict(self.global_state)
            model.eval().requires_grad_(False)
            self._global_model = (self.round, model)
        return self._global_model[1]

    # ---------------------------------------------------------------- training
    def round_lr(self) -> float:
        """The preset's learning rate in this round: ``lr``·``lr_decay``^(round − 1), floored at ``lr_min``."""
        cfg = self.cfg
        return max(cfg.lr * cfg.lr_decay ** (max(self.round, 1) - 1), cfg.lr_min)

    def sgd_settings(self, epochs: int | None = None, lr: float | None = None) -> SGDSettings:
        cfg = self.cfg
        return SGDSettings(
            self.round_lr() if lr is None else lr,
            cfg.momentum,
            cfg.optimizer,
            cfg.weight_decay,
            cfg.batch_size,
            cfg.local_epochs if epochs is None else epochs,
            self.memory_format,
        )

    def train(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        generator: torch.Generator,
        epochs: int | None = None,
        lr: float | None = None,
        after_step: Callable[[], None] | None = None,
        objective: tuple[Any, Any] | None = None,
    ) -> LocalStats:
        """Mini-batch SGD with the preset's optimiser settings (``epochs``/``lr`` override them); ``after_step`` runs
        after each optimiser step. ``objective``: (method, LocalContext) when ``loss_fn`` is the method's
        ``local_loss`` (``after_step`` its hook): in a batched round (``fed.batched``) the client then waits and
        trains together with the round's other clients."""
        s = self.sgd_settings(epochs, lr)
        if objective is not None and self.batched is not None:
            if (stats := self.batched.defer(model, x, y, generator, s, objective, after_step is not None)) is not None:
                return stats
        return local_sgd(model, x, y, loss_fn, generator, s, after_step)

    def loss_of(self, state: State, x: torch.Tensor, y: torch.Tensor) -> float:
        self.model.load_state_dict(state)
        return mean_loss(self.model, x, y, memory_format=self.memory_format)

    # ---------------------------------------------------------------- per-client state
    def load_client_state(self, client: int) -> dict[str, Any]:
        return self.clients.load(client, self.round, self.device)

    def save_client_state(self, client: int, state: dict[str, Any]) -> None:
        self.clients.save(client, self.round, state)

    def share(self, kind: str, amount: float) -> None:
        """Record in the privacy ledger that ``amount`` of ``kind`` (e.g. "raw_samples") left the clients."""
        self.ledger[kind] = self.ledger.get(kind, 0) + amount

    def guarantee(self, name: str, value: float) -> None:
        """Record a privacy guarantee of what left the clients (e.g. "epsilon_total", "delta") in the ledger."""
        self.ledger[name] = value if math.isfinite(value) else "inf"  # strict JSON has no infinity

    def sample_clients(self) -> list[int]:
        m = max(1, int(round(self.cfg.fraction * self.num_clients)))
        return sorted(self.np_rng("sample", self.round).choice(self.num_clients, m, replace=False).tolist())
