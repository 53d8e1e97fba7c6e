"""Typed run configuration and cross-checks that a JSON schema cannot express (names against registries)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FLConfig:
    """Federated-learning settings of one preset (one paper's protocol), resolved for one dataset."""

    num_clients: int = 100
    avg_client_size: int | None = None  # scarcity: derive num_clients from a target average |D_k|
    fraction: float = 0.1
    rounds: int = 100
    local_epochs: int = 5
    batch_size: int = 10
    lr: float = 0.02
    momentum: float = 0.0
    weight_decay: float = 0.0
    aggregation: str = "mean"  # "mean" (simple arithmetic mean) | "weighted" (by local sample count)
    local_test_fraction: float = 0.2
    eval_every: int = 1
    checkpoint_every: int = 5
    model: str = "cnn_mnist"
    report: str = "last"  # protocol the tables apply: "last" round or "best" round
    device: str = "auto"
    channels_last: bool = True
    reduction: str = ""  # how this preset departs from the paper (quick configs); shown in captions

    @classmethod
    def from_preset(cls, preset: dict[str, Any], dataset: str) -> FLConfig:
        """Build from a config preset; ``model`` may be a per-dataset mapping."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(preset) - known
        if unknown:
            raise ValueError(f"unknown preset keys {sorted(unknown)}; valid keys: {sorted(known)}")
        values = dict(preset)
        if isinstance(values.get("model"), dict):
            if dataset not in values["model"]:
                raise ValueError(f"preset has no model for dataset {dataset!r} (models: {values['model']})")
            values["model"] = values["model"][dataset]
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class MethodSpec:
    """A named method variant: an algorithm plus its hyper-parameters (e.g. ``fedprox`` with mu=0.01)."""

    name: str
    algorithm: str
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, name: str, spec: dict[str, Any]) -> MethodSpec:
        spec = dict(spec)
        return cls(name=name, algorithm=spec.pop("algorithm", name), params=spec)


def resolve_preset(presets: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    """A preset with its ``base`` chain applied (a quick preset overrides only what it reduces)."""
    chain, seen = [], set()
    while name is not None:
        if name in seen:
            raise ValueError(f"preset {name!r}: circular 'base' chain {sorted(seen)}")
        if name not in presets:
            raise ValueError(f"unknown preset {name!r}; defined presets: {sorted(presets)}")
        seen.add(name)
        chain.append(presets[name])
        name = presets[name].get("base")
    resolved: dict[str, Any] = {}
    for preset in reversed(chain):
        resolved |= {k: v for k, v in preset.items() if k != "base"}
    return resolved
