"""Typed run configuration: a preset resolved for a dataset (``FLConfig``), method variants, preset inheritance and
the per-paper config files. Cross-checks against the registries live above, in ``fed.validate``."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from pathlib import Path
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
    optimizer: str = "sgd"  # local optimiser: "sgd" (with momentum) | "adam" (FedDPMS' code: Adam, fresh each round)
    weight_decay: float = 0.0
    lr_decay: float = 1.0  # per-round factor: round t trains at max(lr·lr_decay^(t−1), lr_min) (FLea: 0.98 to 1e-5)
    lr_min: float = 0.0
    aggregation: str = "mean"  # "mean" (simple arithmetic mean) | "weighted" (by local sample count)
    local_test_fraction: float = 0.2
    eval_every: int = 1
    checkpoint_every: int = 5
    # also checkpoint after any round that ends this many minutes of wall clock after the last checkpoint (0: rounds
    # only), so a kill loses at most this much and one round: a paper-scale CPU round takes minutes
    checkpoint_minutes: float = 10.0
    model: str = "cnn_mnist"
    init: str = "torch"  # the model's initial weights (INIT_SCHEMES; fed.models.initialise)
    report: str = "last"  # protocol the tables apply: "last" round or "best" round
    device: str = "auto"
    channels_last: bool = True
    # a round's clients train as one batched computation where the method allows it (fed.batched; the same numbers
    # to rounding); false: one after another; "auto": batched on a GPU, the loop on a CPU (where the channels-last loop
    # is faster: docs/results/performance.md)
    vectorise: bool | str = False
    # on CUDA: deterministic kernels, so a seed repeats bit for bit on the same GPU; false: the fastest kernels
    # (cuDNN's autotuner, non-deterministic ones), the same numbers to rounding. float32 (no TF32) either way
    deterministic: bool = True
    reduction: str = ""  # how this preset departs from the paper's stated protocol; its cells are "not comparable"
    note: str = ""  # settings the paper leaves open that this preset fixes (e.g. a ZSDG budget); shown in captions

    # What a preset must state: a paper's protocol never comes silently from another paper's defaults.
    PROTOCOL = (
        "fraction",
        "rounds",
        "local_epochs",
        "batch_size",
        "lr",
        "momentum",
        "weight_decay",
        "aggregation",
        "local_test_fraction",
        "model",
        "report",
    )

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every field that has a default, with it."""
        return {
            f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
            for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        }

    @classmethod
    def from_preset(cls, preset: dict[str, Any], dataset: str, name: str = "preset") -> FLConfig:
        """Build from a config preset (``base`` already resolved); ``model`` may be a per-dataset mapping. Every
        protocol key must be stated, every value must have its field's type."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {k: v for k, v in preset.items() if k != "base"}
        unknown = set(values) - set(fields)
        if unknown:
            raise ValueError(f"{name}: unknown keys {sorted(unknown)}; valid keys: {sorted(fields)}")
        missing = [k for k in cls.PROTOCOL if k not in values]
        if "num_clients" not in values and values.get("avg_client_size") is None:
            missing.insert(0, "num_clients (or avg_client_size)")
        if missing:
            raise ValueError(f"{name}: the protocol must be stated; missing {missing}")
        values = for_dataset(values, dataset, name)
        _check_types(values, name)
        if values.get("vectorise", False) not in (True, False, "auto"):
            raise ValueError(f"{name}: vectorise={values['vectorise']!r} is not true, false or 'auto'")
        if values.get("init", "torch") not in INIT_SCHEMES:
            raise ValueError(f"{name}: init={values['init']!r} is not one of {list(INIT_SCHEMES)}")
        return cls(**values)

    def with_protocol(self, protocol: dict[str, Any] | None, name: str = "method") -> FLConfig:
        """This preset with a method's own local training settings (``protocol:`` of a method, e.g. FedDPMS' Adam at
        lr 1e-3 and B = 64 in a head-to-head whose preset trains with SGD) in place of the preset's."""
        if not protocol:
            return self
        if unknown := sorted(set(protocol) - set(LOCAL_PROTOCOL)):
            valid = list(LOCAL_PROTOCOL)
            raise ValueError(f"{name}: protocol keys {unknown} are not local training settings; valid: {valid}")
        _check_types(protocol, f"{name}: protocol")
        return dataclasses.replace(self, **protocol)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def trains_together(self, device: Any) -> bool:
        """Whether a round's clients train as one batched computation on ``device`` (resolved: a ``torch.device`` or
        its name), by ``vectorise``."""
        if self.vectorise == "auto":
            return str(device).split(":")[0] == "cuda"
        return self.vectorise


# ``init``: "torch" keeps PyTorch's default initialisation; "xavier_relu" is FedDPMS' code (train.py:213-215):
# ``xavier_uniform_`` with the ReLU gain √2 on the weight of every Conv2d and Linear (biases, BatchNorm and transposed
# convolutions keep theirs).
INIT_SCHEMES = ("torch", "xavier_relu")

PER_DATASET = ("model", "num_clients")  # preset keys that may map dataset -> value (FLea: |K| per dataset)


def for_dataset(preset: dict[str, Any], dataset: str, name: str = "preset") -> dict[str, Any]:
    """The preset with every per-dataset mapping (``PER_DATASET`` keys) resolved for ``dataset``."""
    out = dict(preset)
    for key in PER_DATASET:
        if isinstance(out.get(key), dict):
            if dataset not in out[key]:
                raise ValueError(f"{name} has no {key} for dataset {dataset!r} ({key}: {out[key]})")
            out[key] = out[key][dataset]
    return out


_TYPES = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
    "int | None": (int, type(None)),
    "bool | str": (bool, str),
}

# what a method may set for itself (``protocol:``): how its clients train locally, never who takes part, for how
# many rounds or how the server aggregates — those stay the preset's, the same for every method. ``model`` only as
# the preset's network split at another layer (the same parameters: FLea's cut; fed.validate checks it)
LOCAL_PROTOCOL = (
    "optimizer", "lr", "momentum", "batch_size", "weight_decay", "local_epochs", "lr_decay", "lr_min", "model"
)  # fmt: skip


def _check_types(values: dict[str, Any], name: str) -> None:
    fields = {f.name: f for f in dataclasses.fields(FLConfig)}
    for key, value in values.items():
        expected = _TYPES[fields[key].type]
        if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
            raise ValueError(f"{name}: {key}={value!r} is not {' or '.join(t.__name__ for t in expected)}")


@dataclass
class MethodSpec:
    """A named method variant: an algorithm plus its hyper-parameters (e.g. ``fedprox`` with mu=0.01)."""

    name: str
    algorithm: str
    params: dict[str, Any] = field(default_factory=dict)
    tune: dict[str, Any] | None = None  # hyper-parameters chosen on held-out client data (TUNE_DEFAULTS)
    protocol: dict[str, Any] = field(default_factory=dict)  # its own local training settings (FLConfig.with_protocol)

    @classmethod
    def from_config(cls, name: str, spec: dict[str, Any]) -> MethodSpec:
        spec = dict(spec)
        tune, protocol = spec.pop("tune", None), spec.pop("protocol", None) or {}
        return cls(name, spec.pop("algorithm", name), spec, tune and TUNE_DEFAULTS | tune, dict(protocol))

    def grid(self) -> list[dict[str, Any]]:
        """The grid points of ``tune.grid``, each a {parameter: value} mapping."""
        grid = canonical(self.tune["grid"])  # the points' order does not depend on the YAML's key order
        return [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]

    def at(self, point: dict[str, Any], name: str | None = None) -> MethodSpec:
        """The method at a point of its ``tune.grid``: ``protocol.<key>`` sets a local training setting (e.g.
        ``protocol.lr``, FedAvg's learning rate), any other key a parameter of the method."""
        protocol = {k.removeprefix(PROTOCOL_KEY): v for k, v in point.items() if k.startswith(PROTOCOL_KEY)}
        params = {k: v for k, v in point.items() if not k.startswith(PROTOCOL_KEY)}
        return dataclasses.replace(
            self, name=name or self.name, params=self.params | params, protocol=self.protocol | protocol
        )


PROTOCOL_KEY = "protocol."  # a tune.grid key with this prefix tunes a local training setting (MethodSpec.at)


# ``tune:`` of a method: grid (param -> values, required), rounds (null: the preset's), the fraction of each
# client's training split held out for validation, and the validation metric that picks the point; optional
# ``within: {metric, tolerance, of}`` restricts the pick to points near a reference (fed.runner.select_point). It has
# no default, so the records of cells tuned before it existed still match (fed.reference.stale_reasons).
TUNE_DEFAULTS = {"rounds": None, "validation_fraction": 0.1, "select_by": "local_acc_mean"}


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


def point_label(point: dict[str, Any]) -> str:
    """A grid point as names carry it: ``mu0.01``, ``mu0.01-tau0.5`` (sweep variants, tuning runs' work dirs)."""
    return "-".join(f"{k}{point[k]}" for k in sorted(point))


def sweep_variants(name: str, spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{variant name: method spec} of a method with a ``sweep:`` grid, one per grid point, e.g. ``fedprox-mu0.01``."""
    base = {k: v for k, v in spec.items() if k != "sweep"}
    grid = canonical(spec["sweep"])  # the variants and their names do not depend on the YAML's key order
    variants = {}
    for combo in itertools.product(*grid.values()):
        point = dict(zip(grid, combo))
        variants[f"{name}-{point_label(point)}"] = base | point
    return variants


def canonical(value: Any) -> Any:
    """``value`` with every mapping's keys sorted, at any depth (sequences keep their order): what a job's params
    carry. Snakemake compares params by their repr, key order included, so reordering a method's keys in the YAML
    would otherwise rerun its every cell."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return type(value)(canonical(v) for v in value)
    return value


def merge_under(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep merge: ``over`` wins; mappings merge key by key, anything else is replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge_under(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping; syntax errors name the file, line and column."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        raise ValueError(f"invalid YAML in {where}: {err.problem}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of config keys, got {type(data).__name__}")
    return data


RIVALLED_CLAIMS = ("best_method", "margin_count")  # claim kinds that compare candidates with "every other method"


def with_rivals(paper: dict[str, Any]) -> dict[str, Any]:
    """A paper's file with each of its best-method claims comparing the paper's methods only: ``rivals`` defaults to
    every method the file defines or lists in a table or figure. A method a user adds to a paper's table is shown
    beside the paper's, and joins a claim only where an overlay names it in ``rivals``."""
    names = set(paper.get("methods") or {})
    for section in ("tables", "figures"):
        for spec in (paper.get(section) or {}).values():
            names |= set(spec.get("methods") or [])
    claims = {
        name: ({"rivals": sorted(names)} | claim if claim.get("kind") in RIVALLED_CLAIMS else claim)
        for name, claim in (paper.get("claims") or {}).items()
    }
    return paper | {"claims": claims} if claims else paper


def with_papers(config: dict[str, Any], papers_dir: str | Path) -> dict[str, Any]:
    """The workflow config with every paper of ``config['papers']`` merged under it: a paper's file gives its
    presets, partitions, methods, tables and figures; config.yaml and overlays override them, and a table, figure
    or claim an overlay sets to null is left out."""
    papers_dir = Path(papers_dir)
    available = sorted(p.stem for p in papers_dir.glob("*.yaml"))
    merged: dict[str, Any] = {}
    for paper in config.get("papers", []):
        if paper not in available:
            raise ValueError(f"papers: unknown paper {paper!r}; valid choices: {available} ({papers_dir}/)")
        merged = merge_under(merged, with_rivals(load_yaml(papers_dir / f"{paper}.yaml")))
    merged = merge_under(merged, config)
    for section in ("tables", "figures", "claims", "partition_plots"):  # an overlay drops one by setting it to null
        merged[section] = {k: v for k, v in (merged.get(section) or {}).items() if v is not None}
    return merged
