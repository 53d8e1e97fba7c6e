"""Preparatory stages: work a method needs before (or instead of part of) its federated rounds, run once as their
own DAG node and shared by every cell that needs it.

A method declares its stages (``Algorithm.stages()`` → {name: Stage}); the workflow turns each distinct
(preset, dataset, partition, seed, stage) into one ``stage`` job whose output file reaches the training job as
``ctx.stages[name]``. Kinds are declared here; ``fed.runner.stage_runner`` gives the function that runs each:

- ``fedavg_prefix`` (rounds=r): FedAvg up to round r — the shared prefix of every run that starts augmenting at
  round r + 1 (Fed-ZDA's start-round ablations). ``continues_from`` makes prefixes of one trajectory chain: the
  prefix at round 89 continues from the one at 79. Optional: with ``warm_start: false`` each run recomputes it.

- ``centralized_model``: a model trained centrally on every client's training data for the preset's rounds —
  Fed-ZDA's oracle classifier (Sec. 4.4), which labels the ZSDG images of Fig. 3.

- ``tuning`` (method=name): hyper-parameter selection for a method with ``tune:`` — one run per grid point on
  held-out client data (``fed.data.partition.validation_split``), the best point by ``select_by``. The cell then
  runs with the chosen values (q-FFL's q, as its authors select it: on validation data, never on a test set).
  Computed once per (preset, dataset, partition), on seed 0, and shared by every seed — or per seed (``tune:
  {per_seed: true}``). With ``tune: {after: other}`` it starts from the values ``other``'s tuning chose (its input
  file): the head-to-head protocol's methods train at the lr FedAvg chose for that regime and seed.

- ``dp_cgan`` (epsilon=ε0 and the GAN's settings): DA-FL's Private Sample Generation (Algorithm 2, ``fed.dpgan``),
  one conditional GAN per client trained with DP-SGD (Opacus) on that client's data. The file holds each client's
  generator, DP-SGD steps, ε spent and training time — never data. Shared by every γ and label budget ε1.

- ``model_at`` (method=name, rounds=r): the method's cell run with its own config and stopped after round r; its
  global model then is the cell's at round r (``tests/test_stages.py``) — what an attack on an early round reads
  (FLea Fig. 9 attacks the models of rounds 1 and 10).

- ``vae_prelim`` (rounds=P, vae_weight=λ): FedDPMS' Stage I — P rounds of VAE training with local decoders, ending
  with the global decoder. Its checkpoint is where every FedDPMS cell with that (P, λ) continues, whatever its
  noise, clipping and quota. Optional: with ``warm_start: false`` each cell trains its own Stage I.

A stage that runs the method's own rounds (``vae_prelim``, ``tuning``: ``StageKind.own_protocol``) trains with the
method's ``protocol:`` (its local optimiser in place of the preset's, ``FLConfig.with_protocol``): the workflow adds
it to the stage's parameters as ``fl_<setting>``, so it is part of the stage's file name and identity. ``model_at``
runs its method's configured spec, ``protocol:`` included (the stage job's ``method`` param).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Stage:
    kind: str
    params: tuple[tuple[str, Any], ...]  # sorted (name, value) pairs: hashable, order-free

    @classmethod
    def of(cls, kind: str, **params: Any) -> Stage:
        if kind not in STAGE_KINDS:
            raise ValueError(f"unknown stage kind {kind!r}; valid choices: {sorted(STAGE_KINDS)}")
        return cls(kind, tuple(sorted(params.items())))

    @property
    def key(self) -> str:
        """File-name id, e.g. ``fedavg_prefix-rounds79``; a kind with ``key_params`` names those and a short hash
        of the rest (``dp_cgan-epsilon50-3f2a9c1e``)."""
        shown = self.spec.key_params
        if shown is None:
            return "-".join([self.kind, *(f"{k}{v}" for k, v in self.params)])
        rest = repr([(k, v) for k, v in self.params if k not in shown])
        digest = hashlib.sha256(rest.encode()).hexdigest()[:8]
        return "-".join([self.kind, *(f"{k}{v}" for k, v in self.params if k in shown), digest])

    @property
    def spec(self) -> StageKind:
        return STAGE_KINDS[self.kind]

    def param(self, name: str) -> Any:
        return dict(self.params)[name]

    @property
    def per_seed(self) -> bool:
        """Computed for every seed (its kind's default, or a tuning's ``per_seed``), else once on seed 0."""
        return dict(self.params).get("per_seed", self.spec.per_seed)

    def with_protocol(self, protocol: dict[str, Any]) -> Stage:
        """This stage run with a method's local training settings (``fl_<setting>`` parameters), where its kind
        runs the method's own rounds."""
        if not (protocol and self.spec.own_protocol):
            return self
        return Stage.of(self.kind, **dict(self.params), **{f"{PROTOCOL_PREFIX}{k}": v for k, v in protocol.items()})

    @property
    def protocol(self) -> dict[str, Any]:
        """The local training settings this stage runs with in place of the preset's (empty: the preset's)."""
        return {k.removeprefix(PROTOCOL_PREFIX): v for k, v in self.params if k.startswith(PROTOCOL_PREFIX)}

    @property
    def declared(self) -> Stage:
        """The stage as the method declares it (``Algorithm.stages()``), without the protocol: what a warm-start
        checkpoint is tagged with (its protocol is in the checkpoint's trajectory fingerprint)."""
        return Stage(self.kind, tuple((k, v) for k, v in self.params if not k.startswith(PROTOCOL_PREFIX)))


PROTOCOL_PREFIX = "fl_"


@dataclass(frozen=True)
class StageKind:
    optional: bool = False  # a shortcut the run can do without (computes it itself)
    continues_from: str | None = None  # ordinal parameter: a stage continues from the same kind's lower value
    per_seed: bool = True  # False: computed once, on seed 0's partition and streams, for every seed's cells
    key_params: tuple[str, ...] | None = None  # name only these in the file name, hash the rest (many settings)
    algorithm: str | None = None  # the method whose code it runs (fed.identity); None: the method it tunes
    own_protocol: bool = False  # runs the method's own rounds: the method's ``protocol:`` applies to it


STAGE_KINDS: dict[str, StageKind] = {
    "fedavg_prefix": StageKind(optional=True, continues_from="rounds", algorithm="fedavg"),
    "centralized_model": StageKind(algorithm="centralized"),
    "tuning": StageKind(per_seed=False, own_protocol=True),  # q-FFL's authors select q once, not per seed
    "dp_cgan": StageKind(key_params=("epsilon",), algorithm="dafl"),  # DA-FL: one DP-CGAN per client, for every γ
    "model_at": StageKind(),  # an early round's global model (FLea Fig. 9's attacks); its method's spec, protocol too
    # FedDPMS' Stage I, shared by every σ, C and α
    "vae_prelim": StageKind(optional=True, algorithm="feddpms", own_protocol=True),
}
