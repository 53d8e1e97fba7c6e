"""A federated run from start to finish: set-up, resume or warm start, the round loop (``fed.rounds``),
evaluation (``fed.evaluation``), checkpoints (``fed.checkpoint``), progress and divergence.

Determinism: every random choice draws from a stream derived from (seed, purpose, round, client), so a run is
bit-identical on the same machine whether it ran through or was resumed from a checkpoint.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import torch
from tqdm import tqdm

from fed import checkpoint, identity, provenance
from fed.algorithms.base import Algorithm, hyperparameters
from fed.checkpoint import OutOfTime  # the run reached its ``stop_at``: its checkpoint holds the round given
from fed.client_store import ClientStore
from fed.config import FLConfig
from fed.context import Context
from fed.data.datasets import TensorDataset
from fed.device import reproducible_cuda, resolve_device
from fed.evaluation import evaluate
from fed.rounds import run_round

ROUNDS_FILE = "rounds.json"

# Settings that do not change the training trajectory (what is evaluated or saved, and for how long).
TRAJECTORY_NEUTRAL = (
    "rounds",
    "eval_every",
    "checkpoint_every",
    "checkpoint_minutes",
    "report",
    "reduction",
    "note",
    "device",
)
EVALUATED = ("global_acc", "class_acc_variance", "local_acc_mean", "client_acc_variance")


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
        stages: dict[str, Path] | None = None,
        on_round: Callable[[dict], None] | None = None,
        on_start: Callable[[str, bool], None] | None = None,
        stop_at: float | None = None,
        until: int | None = None,
        diverged_in_tuning: bool = False,
    ):
        self.cfg, self.algorithm, self.seed, self.label = cfg, algorithm, seed, label
        # every tuning point of this method diverged (docs/headtohead-protocol.md, 2.5): the run reports it diverged
        # before round 1 and trains nothing, whatever a checkpoint of its identity says
        self.diverged_in_tuning = diverged_in_tuning
        self.stop_at = stop_at  # time.time() after which the run checkpoints its last round and stops (OutOfTime)
        # the last round to run: the cell's config, stopped early (a ``model_at`` stage: its rounds are the cell's)
        self.last_round = min(cfg.rounds, until or cfg.rounds)
        self.work_dir = Path(work_dir) if work_dir else None
        self.progress, self.on_round, self.on_start = progress, on_round, on_start
        device = resolve_device(cfg.device)
        if device.type == "cuda":
            reproducible_cuda(cfg.deterministic)
        self._data_hash = checkpoint.tensor_hash(train.x, train.y, test.y)
        store = ClientStore(self.work_dir / "clients" if self.work_dir else None)
        self.ctx = Context(cfg, train, test, partition, seed, device, store, stages, algorithm.extra_modules)
        self.history: list[dict[str, Any]] = []
        self.diverged_round: int | None = None
        self.wall_before = 0.0  # wall time of earlier segments of this run (before a resume)
        self.here = provenance.machine(device)  # where this segment runs (fed.provenance; not its identity)
        self.earlier_machines: list[dict[str, Any]] = []  # where the rounds before a resume or warm start ran
        self._prefix_fp: dict[str, str] = {}

    # convenient views for tests and benchmarks
    @property
    def round(self) -> int:
        return self.ctx.round

    @property
    def global_state(self):
        return self.ctx.global_state

    @property
    def model(self):
        return self.ctx.model

    # ------------------------------------------------------------------ identity
    def prefix_fingerprint(self, module: str | None = None) -> str:
        """Identity of the training trajectory shared by every method that is FedAvg up to some round: settings,
        seed, partition, data and the code of ``module`` (default: this run's method; ``fed.identity``). A FedAvg
        prefix is checked against FedAvg's code, a method's own stage against the method's."""
        module = module or type(self.algorithm).__module__
        if module not in self._prefix_fp:
            cfg = {k: v for k, v in self.cfg.to_dict().items() if k not in TRAJECTORY_NEUTRAL}
            self._prefix_fp[module] = checkpoint.digest(
                [
                    cfg,
                    self.seed,
                    [t.tolist() for t in self.ctx.train_idx],
                    self._data_hash,
                    identity.code_hash(module),
                    torch.get_num_threads(),
                    self.ctx.device.type,
                ]
            )
        return self._prefix_fp[module]

    def fingerprint(self) -> str:
        """Identity of the run; a checkpoint of another identity is never resumed."""
        return checkpoint.digest(
            [
                self.prefix_fingerprint(),
                self.cfg.rounds,
                type(self.algorithm).__name__,
                hyperparameters(self.algorithm),
                sorted((k, str(v)) for k, v in self.ctx.stages.items()),
            ]
        )

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_path(self) -> Path | None:
        return self.work_dir / "checkpoint.pt" if self.work_dir else None

    def due(self) -> bool:
        """``checkpoint_minutes`` of wall clock have passed since the last checkpoint (or this segment's start)."""
        minutes = self.cfg.checkpoint_minutes
        return minutes > 0 and time.perf_counter() - self._saved_at >= 60 * minutes

    def save_checkpoint(self, wall: float) -> None:
        self._saved_at = time.perf_counter()
        if not self.checkpoint_path:
            return
        checkpoint.save(
            self.checkpoint_path,
            {
                "fingerprint": self.fingerprint(),
                "prefix_fingerprint": self.prefix_fingerprint(),
                "round": self.ctx.round,
                "global_state": self.ctx.global_state,
                "algorithm": self.algorithm.state_dict(),
                "history": self.history,
                "diverged_round": self.diverged_round,
                "wall_seconds": wall,
                "ledger": self.ctx.ledger,
                "machines": self.machines(),
            },
        )
        # the previous checkpoint stays readable as a fallback, so keep the client state it needs
        self.ctx.clients.commit(keep_from=self._previous_round)
        self._previous_round = self.ctx.round

    @property
    def rounds_path(self) -> Path | None:
        """``rounds.json``: the rounds so far, rewritten after every round (a checkpoint comes every
        ``checkpoint_every``), for ``fed campaign --status`` to read a running cell between checkpoints."""
        return self.work_dir / ROUNDS_FILE if self.work_dir else None

    def write_rounds(self, wall: float) -> None:
        if not self.rounds_path:
            return
        rows = [{k: r[k] for k in ("round", "seconds", "global_acc") if k in r} for r in self.history]
        self.rounds_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.rounds_path.with_name(ROUNDS_FILE + ".tmp")  # renamed over it: a reader never sees half of it
        tmp.write_text(json.dumps({"round": self.ctx.round, "wall_seconds": wall, "history": rows}))
        os.replace(tmp, self.rounds_path)

    def try_resume(self) -> bool:
        self._previous_round = 0
        if not self.checkpoint_path:
            return False
        found = checkpoint.newest(self.checkpoint_path, self.ctx.device, self._log)
        if found is None:
            return False
        path, ckpt = found
        if ckpt["fingerprint"] != self.fingerprint():
            self._log(f"not resuming {path}: it belongs to other settings, data or code")
            return False
        self._load(ckpt)
        self.algorithm.load_state_dict(ckpt["algorithm"])
        self.wall_before = ckpt.get("wall_seconds", 0.0)
        self._log(f"resumed from {path} at round {self.ctx.round}")
        return True

    @property
    def warm_start(self) -> Path | None:
        """A FedAvg prefix checkpoint to continue from (the ``warm`` stage, see ``fed.stages``)."""
        warm = self.ctx.stages.get("warm")
        return Path(warm) if warm else None

    def load_warm_start(self) -> None:
        """Continue from a checkpoint at round r - 1: a FedAvg prefix (start-round ablations, valid when the method
        is FedAvg up to that round), or the output of the stage the method declares as ``warm`` (FedDPMS' Stage I,
        tagged with that stage's key). Trajectory settings, seed, partition, data and code must be the same."""
        ckpt = checkpoint.load_file(self.warm_start, self.ctx.device, "warm start")
        declared = self.algorithm.stages().get("warm")
        own_stage = declared is not None and declared.kind != "fedavg_prefix"
        until = math.inf if own_stage else self.algorithm.fedavg_until
        if ckpt["prefix_fingerprint"] != self.prefix_fingerprint(None if own_stage else identity.PREFIX_MODULE):
            raise ValueError(
                f"warm start {self.warm_start}: other settings, seed, partition, data or code than "
                "this run; delete it and rerun, Snakemake recomputes it"
            )
        if own_stage and ckpt.get("stage") != declared.key:
            raise ValueError(
                f"warm start {self.warm_start} is the output of {ckpt.get('stage') or 'a FedAvg prefix'}, "
                f"not of {declared.key}, which {type(self.algorithm).__name__} continues from"
            )
        if ckpt["round"] >= until or ckpt["round"] >= self.cfg.rounds:
            where = (
                f"the last round, {self.cfg.rounds}"
                if ckpt["round"] < until
                else f"round {until}, where {type(self.algorithm).__name__} stops being FedAvg"
            )
            raise ValueError(f"warm start {self.warm_start} at round {ckpt['round']} does not precede {where}")
        self._load(ckpt)
        self._log(f"warm-started from {self.warm_start} at round {self.ctx.round}")

    def _load(self, ckpt: dict) -> None:
        self.ctx.round, self.ctx.global_state = ckpt["round"], ckpt["global_state"]
        self.history, self.diverged_round = ckpt["history"], ckpt.get("diverged_round")
        self.ctx.ledger = ckpt.get("ledger", self.ctx.ledger)
        self.earlier_machines = ckpt.get("machines", [])

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict[str, Any]:
        cfg, ctx = self.cfg, self.ctx
        started = self._saved_at = time.perf_counter()
        self.algorithm.setup(ctx)  # deterministic; re-run on resume, expensive products come from stages
        if self.diverged_in_tuning:
            resumed, self.diverged_round, self.history = False, 0, []
            self._log("every tuning point diverged: no round is trained, the run reports it diverged before round 1")
        else:
            resumed = self.try_resume()
        if not resumed and not self.diverged_in_tuning:
            if self.work_dir and (self.work_dir / "clients").exists():
                shutil.rmtree(self.work_dir / "clients")  # client state of another identity
            if self.warm_start:
                self.load_warm_start()
        if cfg.vectorise:  # which path trains the clients (each batched round's history row says it too)
            name, device = type(self.algorithm).__name__, ctx.device
            if not cfg.trains_together(device):
                self._log(f"vectorise: auto: {name}'s clients train one by one on {device} (batched on a GPU only)")
            elif self.algorithm.vectorise:
                self._log(f"{name}: a round's clients train together (fed.batched)")
            else:
                self._log(f"{name} is not on the batched path: its clients train one by one")
        if self.rounds_path:  # a killed segment's rounds past its checkpoint are run again: not shown as done
            self.rounds_path.unlink(missing_ok=True)
        if self.on_start:  # e.g. MLflow: continue the run of this identity, or start it afresh
            self.on_start(self.fingerprint(), resumed)
        last = self.last_round
        bar = tqdm(
            total=last,
            initial=ctx.round,
            desc=self.label or "rounds",
            unit="round",
            file=self.progress,
            disable=self.progress is None,
            mininterval=1.0,
            dynamic_ncols=True,
        )
        while ctx.round < last and self.diverged_round is None:
            row = run_round(ctx, self.algorithm)
            diverged = row.pop("diverged")
            t0 = time.perf_counter()
            if diverged or ctx.round % cfg.eval_every == 0 or ctx.round == last:
                row.update(evaluate(ctx))
            row["seconds"] += time.perf_counter() - t0
            self.history.append(row)
            self.write_rounds(self.wall_before + time.perf_counter() - started)
            bar.update(1)
            if "global_acc" in row:
                bar.set_postfix(acc=f"{row['global_acc']:.2f}", loss=f"{row['train_loss']:.3f}")
            if diverged:
                self.diverged_round = ctx.round
                self._log(f"diverged at round {ctx.round} (non-finite loss or weights); stopping this run")
            if self.on_round:
                self.on_round(row)
            out_of_time = self.stop_at is not None and time.time() > self.stop_at and ctx.round < last
            if diverged or out_of_time or ctx.round % cfg.checkpoint_every == 0 or ctx.round == last or self.due():
                self.save_checkpoint(self.wall_before + time.perf_counter() - started)
            if out_of_time and not diverged:
                bar.close()
                self._log(f"out of time after round {ctx.round}: checkpointed, resumes from there")
                raise OutOfTime(ctx.round)
        bar.close()
        return self.summary(time.perf_counter() - started)

    def summary(self, segment_seconds: float) -> dict[str, Any]:
        evaluated = [r for r in self.history if "global_acc" in r]
        last = evaluated[-1] if evaluated else {}
        if self.diverged_round is not None:
            last = {k: math.nan for k in EVALUATED} | {"round": self.diverged_round}
        finite = [r for r in evaluated if math.isfinite(r["global_acc"])]
        best = max(finite, key=lambda r: r["global_acc"]) if finite else {}
        return {
            "diverged": self.diverged_round is not None,
            "diverged_round": self.diverged_round,
            "rounds_completed": self.ctx.round,
            "last": last,
            "best": best,
            "history": self.history,
            "wall_seconds": self.wall_before + segment_seconds,
            "segment_seconds": segment_seconds,
            "device": str(self.ctx.device),
            "threads": torch.get_num_threads(),  # part of the identity: results depend on it
            "shared": dict(self.ctx.ledger),
            "machine": self._machine_record(),
        }

    def _machine_record(self) -> dict[str, Any]:
        """This segment's machine, with ``earlier``: the others that ran rounds of this run, if any."""
        earlier = [m for m in self.earlier_machines if m != self.here]
        return self.here | ({"earlier": earlier} if earlier else {})

    def machines(self) -> list[dict[str, Any]]:
        """Where this run's rounds ran, oldest first, each machine once in a row (what a checkpoint carries)."""
        earlier = self.earlier_machines
        return earlier if earlier[-1:] == [self.here] else [*earlier, self.here]

    def _log(self, msg: str) -> None:
        if self.progress is not None:
            tqdm.write(f"[{self.label}] {msg}", file=self.progress)
