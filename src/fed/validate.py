"""Cross-checks of a schema-valid workflow config against the package's registries (names, parameters, ranges).

Lives above ``fed.config`` (which holds only types), so that nothing below imports the registries.
"""

from __future__ import annotations

import copy
import inspect
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from fed.algorithms import ALGORITHMS, PLANNED
from fed.config import FLConfig, MethodSpec, for_dataset, resolve_preset, sweep_variants
from fed.data.datasets import DATASETS
from fed.data.partition import PARTITIONS, make_partition
from fed.metrics import METRICS, VALIDATION_METRICS
from fed.models import MODELS
from fed.reporting.claims import claim_sources
from fed.reporting.figure_kinds import FIGURE_KINDS, key_errors
from fed.reporting.leaderboard import DEFAULT_BASELINE
from fed.reporting.tables import LAYOUTS, published_papers

PAPER_KEYS = ("paper_method", "paper_dataset", "paper_partition", "paper_where")  # a paper table's keys only


def check_config(config: dict[str, Any]) -> list[str]:
    """Cross-check a schema-valid workflow config; returns warnings, raises ValueError listing every error."""
    errors: list[str] = nonfinite_errors(config)
    warnings: list[str] = []
    methods = config.get("methods", {})
    partitions = config.get("partitions", {})
    presets = config.get("presets", {})
    for name, spec in methods.items():
        algo = spec.get("algorithm", name)
        if algo not in ALGORITHMS and algo not in PLANNED:
            errors.append(
                f"method {name!r}: unknown algorithm {algo!r}; valid choices: {sorted(ALGORITHMS)}"
                f" (planned, not yet implemented: {sorted(PLANNED)})"
            )
        elif algo in ALGORITHMS:
            points = sweep_variants(name, spec).values() if "sweep" in spec else [spec]
            protocols = [spec.get("protocol")]
            if "tune" in spec:
                errors += [f"method {name!r}: {e}" for e in tune_errors(spec, methods, name)]
                tuned = [
                    MethodSpec.from_config(name, spec).at(point) for point in MethodSpec.from_config(name, spec).grid()
                ]
                points = [spec | t.params for t in tuned]
                protocols = [t.protocol for t in tuned]  # a grid's protocol.<key> points: local settings
            for protocol in protocols:
                try:
                    FLConfig().with_protocol(protocol, f"method {name!r}")
                except ValueError as err:
                    errors.append(str(err))
                    break
            if (model := (spec.get("protocol") or {}).get("model")) is not None and model not in MODELS:
                errors.append(f"method {name!r}: unknown protocol model {model!r}; valid choices: {sorted(MODELS)}")
            for point in points:
                params = {k: v for k, v in point.items() if k not in ("algorithm", "tune", "protocol")}
                errors += [f"method {name!r}: {e}" for e in parameter_errors(ALGORITHMS[algo], params)]
    for name, spec in partitions.items():
        if spec["scheme"] not in PARTITIONS:
            errors.append(f"partition {name!r}: unknown scheme {spec['scheme']!r}; valid choices: {sorted(PARTITIONS)}")
    for name, preset in presets.items():
        models = preset.get("model", {})
        for m in models.values() if isinstance(models, dict) else [models]:
            if m not in MODELS:
                errors.append(f"preset {name!r}: unknown model {m!r}; valid choices: {sorted(MODELS)}")
    for ename, exp in config.get("tables", {}).items():
        where = f"table {ename!r}"
        errors += [f"{where}: {e}" for e in preset_errors(presets, exp["preset"], exp["datasets"])]
        errors += [f"{where}: {e}" for e in split_errors(config, exp)]
        errors += [f"{where}: {e}" for e in seed_errors(exp["seeds"])]
        layout = exp.get("layout", "paper")
        if layout not in LAYOUTS:
            errors.append(f"{where}: unknown layout {layout!r}; valid choices: {list(LAYOUTS)}")
        elif layout == "leaderboard":
            errors += [f"{where}: {e}" for e in leaderboard_errors(exp)]
            if exp.get("last_rounds"):
                errors.append(f"{where}: `last_rounds` belongs to a paper table (layout: paper), not a leaderboard")
            if len(exp["seeds"]) < 2:
                warnings.append(f"{where}: fewer than 2 seeds: a leaderboard's paired tests need 2 and are left out")
        else:
            errors += [
                f"{where}: `{k}` belongs to a leaderboard (layout: leaderboard); a paper table has none"
                for k in ("baseline", "analyses")
                if exp.get(k) not in (None, False)  # analyses defaults to false
            ]
        if layout == "paper" and exp.get("published", True) and exp["paper"] not in published_papers():
            errors.append(
                f"{where}: no published numbers for paper {exp['paper']!r} (valid choices: "
                f"{published_papers()}); set `published: false` for a table without them"
            )
        for metric in [*exp["metrics"], exp.get("select_by", "local_acc_mean")]:
            if metric not in METRICS:
                errors.append(f"{where}: unknown metric {metric!r}; valid choices: {list(METRICS)}")
        for d in exp["datasets"]:
            if d not in DATASETS:
                errors.append(f"{where}: unknown dataset {d!r}; valid choices: {sorted(DATASETS)}")
        for p in exp["partitions"]:
            if p not in partitions:
                errors.append(f"{where}: unknown partition {p!r}; defined partitions: {sorted(partitions)}")
                continue
            k = partitions[p].get("k")
            for d in exp["datasets"]:
                if k is not None and d in DATASETS and k > DATASETS[d].num_classes:
                    errors.append(f"{where}: partition {p!r} has k={k} > {DATASETS[d].num_classes} classes of {d}")
        for m in exp["methods"]:
            if m not in methods:
                errors.append(f"{where}: unknown method {m!r}; defined methods: {sorted(methods)}")
            elif methods[m].get("algorithm", m) in PLANNED:
                warnings.append(f"{where}: method {m!r} is not yet implemented; its rows say so")
            elif exp["preset"] in presets:
                errors += [f"{where}: {e}" for e in cell_errors(m, methods[m], presets, exp["preset"])]
    for fname, fig in config.get("figures", {}).items():
        errors += [f"figure {fname!r}: {e}" for e in seed_errors(fig.get("seeds", []))]
        errors += figure_errors(fname, fig, config)
    for pname, plot in config.get("partition_plots", {}).items():
        for key, known in (("preset", presets), ("dataset", DATASETS), ("partition", config.get("partitions", {}))):
            if plot[key] not in known:
                errors.append(f"partition_plots.{pname}: unknown {key} {plot[key]!r}; valid choices: {sorted(known)}")
    for cname, claim in config.get("claims", {}).items():
        for name in claim_sources(claim):
            source = config.get("tables", {}).get(name) or config.get("figures", {}).get(name)
            if source is None:
                errors.append(
                    f"claim {cname!r}: unknown source {name!r}; tables and figures: "
                    f"{sorted([*config.get('tables', {}), *config.get('figures', {})])}"
                )
            elif source.get("layout", "paper") == "leaderboard":
                errors.append(
                    f"claim {cname!r}: reads the leaderboard {name!r}; claims read paper tables and figures (a "
                    "leaderboard tests every method against its baseline itself)"
                )
            elif source["paper"] != claim["paper"]:
                errors.append(f"claim {cname!r} of {claim['paper']!r} reads {name!r} of {source['paper']!r}")
        if claim["kind"] in ("trend", "correlation") and "x" not in claim:
            errors.append(f"claim {cname!r}: a {claim['kind']} needs `x` (the column it goes with)")
        elif claim["kind"] in ("best_method", "margin_count") and not claim.get("methods"):
            errors.append(f"claim {cname!r}: {claim['kind']} needs `methods` (the candidates)")
        elif claim["kind"] == "margin_count" and not {"margin", "fraction"} <= set(claim):
            errors.append(f"claim {cname!r}: margin_count needs `margin` and `fraction`")
        elif claim["kind"] in ("no_gain", "small_loss") and not {"x", "margin"} <= set(claim):
            errors.append(f"claim {cname!r}: {claim['kind']} needs `x` and `margin`")
    if not errors:
        errors += partition_errors(config)
    if errors:
        raise ValueError("invalid config:\n  - " + "\n  - ".join(number_hint(e) for e in dict.fromkeys(errors)))
    return warnings


def seed_errors(seeds: list[int]) -> list[str]:
    """Each seed is one run: listed twice, its run would count twice in every mean and test over seeds."""
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if not twice:
        return []
    return [f"seeds {seeds} list seed {', '.join(map(str, twice))} more than once; list each seed once"]


def nonfinite_errors(value: Any, key: str = "") -> list[str]:
    """NaN anywhere, ±inf outside a method's own parameters (DA-FL's ``epsilon: .inf``: no noise) and claims: YAML's
    .nan and .inf pass the schema's ranges (a comparison with NaN is false), and a preset's ``lr: .nan`` diverges at
    round 1."""
    if isinstance(value, dict):
        return [e for k, v in value.items() for e in nonfinite_errors(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, list):
        return [e for i, v in enumerate(value) for e in nonfinite_errors(v, f"{key}[{i}]")]
    if not isinstance(value, float) or math.isfinite(value):
        return []
    parts = key.split(".")
    if math.isinf(value) and parts[0] in ("methods", "claims") and "protocol" not in parts:
        return []
    return [f"{key}: {value} is not a finite number"]


def number_hint(message: str) -> str:
    """``message`` with how to write the number it quotes as text: PyYAML reads YAML 1.1, where a float needs a dot
    and a signed exponent (``1.0e6`` and ``1e-2`` are strings, ``1.0e+6`` and ``1.0e-2`` numbers)."""
    found = re.search(r"'([-+]?(?:\d+\.?\d*|\.\d+)[eE]([-+]?)(\d+))' is not", message)
    if not found:
        return message
    text, sign, digits = found.groups()
    mantissa = text[: -len(sign + digits) - 1]
    mantissa += "" if "." in mantissa else ".0"
    plain = repr(float(text))
    right = f"{mantissa}e{sign or '+'}{digits}" + ("" if "e" in plain else f" or {plain}")
    return f"{message} (YAML reads {text} as text: write {right})"


def leaderboard_errors(table: dict[str, Any]) -> list[str]:
    """A leaderboard has no paper values, and its baseline is one of its methods."""
    errors = [] if table.get("published") is False else ["a leaderboard has no paper values: set `published: false`"]
    errors += [f"{k} compares with a paper; a leaderboard has no paper values" for k in PAPER_KEYS if k in table]
    baseline = table.get("baseline", DEFAULT_BASELINE)
    if baseline not in table["methods"]:
        errors.append(f"baseline {baseline!r} is not among the table's methods {table['methods']}")
    if table.get("contrasts") and not table.get("analyses"):
        errors.append("contrasts are tested by the analyses: set `analyses: true`")
    for method, against in table.get("contrasts", {}).items():
        errors += [f"contrast {method} against {against}: {m!r} is not among the table's methods"
                   for m in (method, against) if m not in table["methods"]]  # fmt: skip
    return errors


def figure_errors(name: str, fig: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """A figure's keys (against its kind), and every cell it reads: preset, partition, method, start rounds."""
    errors = key_errors(name, fig)
    if errors:
        return errors
    kind, presets = FIGURE_KINDS[fig["kind"]], config.get("presets", {})
    for preset in dict.fromkeys(kind.presets(fig)):
        errors += [f"figure {name!r}: {e}" for e in preset_errors(presets, preset, fig["datasets"])]
    if errors:
        return errors
    defined = dict(config.get("methods", {}))
    for m, spec in list(defined.items()):  # a sweep's variants (fedprox_best-mu0.01) are methods too
        if "sweep" in spec:
            defined |= sweep_variants(m, spec)
    try:
        methods = defined | kind.variants(fig, defined)
        kind.stages(fig, defined)  # the methods whose stages it reads (e.g. DA-FL's GANs per ε0)
    except KeyError as err:
        return [f"figure {name!r}: unknown method {err.args[0]!r}; defined methods: {sorted(defined)}"]
    try:
        cells = kind.cells(fig)
    except ValueError as err:  # keys that disagree with each other (a baseline that is not among the methods)
        return [f"figure {name!r}: {err}"]
    for c in cells:
        if c["dataset"] not in DATASETS:
            errors.append(f"figure {name!r}: unknown dataset {c['dataset']!r}; valid choices: {sorted(DATASETS)}")
        if c["partition"] not in config.get("partitions", {}):
            errors.append(f"figure {name!r}: unknown partition {c['partition']!r}")
        if c["method"] not in methods:
            errors.append(f"figure {name!r}: unknown method {c['method']!r}; defined methods: {sorted(methods)}")
            continue
        errors += [
            f"figure {name!r}: {e}" for e in cell_errors(c["method"], methods[c["method"]], presets, c["preset"])
        ]
    return errors


def split_errors(config: dict[str, Any], table: dict[str, Any]) -> list[str]:
    """A method's ``protocol: {model}`` must be the table preset's network split at another layer: the same
    parameters (shapes, in order) and the same outputs, so that only what the method reads at the cut differs."""
    import torch

    from fed.data.datasets import info
    from fed.models import build_model

    errors = []
    for m in table["methods"]:
        own = (config["methods"].get(m, {}).get("protocol") or {}).get("model")
        if own is None or own not in MODELS:
            continue
        for d in table["datasets"]:
            try:
                preset = for_dataset(resolve_preset(config["presets"], table["preset"]), d)
            except (KeyError, ValueError):
                continue  # reported by preset_errors
            meta = info(d)
            x = torch.randn(2, meta.channels, meta.size, meta.width or meta.size, generator=torch.Generator())
            nets = []  # (parameter shapes in order — names follow the split —, outputs) of each, same initialisation
            for name in (preset["model"], own):
                with torch.random.fork_rng(), torch.no_grad():  # the caller's random state stays untouched
                    torch.manual_seed(0)
                    net = build_model(name, meta.channels, meta.num_classes, meta.size, meta.width or None).eval()
                    nets.append(([v.shape for v in net.state_dict().values()], net(x)))
            if nets[0][0] != nets[1][0] or not torch.allclose(nets[0][1], nets[1][1]):
                errors.append(
                    f"method {m!r}: protocol model {own!r} is not {preset['model']!r} split elsewhere (other "
                    f"parameters or outputs on {d}); a method may move the cut, not change the network"
                )
    return errors


def tune_errors(spec: dict[str, Any], methods: dict[str, Any] | None = None, name: str | None = None) -> list[str]:
    """``tune:`` is a grid of the method's own parameters, chosen by a known metric; not combined with a sweep;
    ``after`` names another tuned method of ``methods``, without a circle; an empty grid only with ``after``."""
    errors = []
    if not spec["tune"]["grid"] and not spec["tune"].get("after"):
        errors.append("tune: an empty grid tunes nothing; give values, or `after` (start from another's tuning)")
    step, seen = spec["tune"].get("after"), {name}
    while step:  # the chain of tunings this one starts from
        if step in seen:
            errors.append(f"tune.after leads back to {step!r}: a tuning cannot wait on itself")
            break
        if step not in (methods or {}) or "tune" not in methods[step]:
            errors.append(f"tune.after: {step!r} is not a configured method with `tune`")
            break
        seen.add(step)
        step = methods[step]["tune"].get("after")
    if stray := set(spec["tune"].get("round_params") or []) - set(spec["tune"]["grid"]):
        errors.append(f"tune.round_params: {sorted(stray)} are not grid parameters")
    if "sweep" in spec:
        errors.append("`tune` and `sweep` exclude each other (tune selects on validation data, a sweep on the table's)")
    tune = spec["tune"]
    choices = f"valid choices: {list(VALIDATION_METRICS)} (the others read the test set)"
    if tune.get("select_by", "local_acc_mean") not in VALIDATION_METRICS:
        errors.append(f"tune: unknown select_by {tune['select_by']!r}; {choices}")
    if within := tune.get("within"):
        if within["metric"] not in VALIDATION_METRICS:
            errors.append(f"tune.within: unknown metric {within['metric']!r}; {choices}")
        of, grid = within.get("of", "best"), tune["grid"]
        if of != "best" and (set(of) != set(grid) or any(v not in grid[k] for k, v in of.items())):
            errors.append(f"tune.within.of: {of!r} is not a point of the grid {grid!r}; give one, or 'best'")
    return errors


def cell_errors(method: str, spec: dict[str, Any], presets: dict[str, Any], preset: str) -> list[str]:
    """A method that starts at round s (Fed-ZDA's augmentation) needs a preset of at least s rounds; its tuning
    runs may not be longer than the run they tune."""
    start, rounds = spec.get("start_round", 1), resolve_preset(presets, preset)["rounds"]
    errors = []
    if start > rounds:
        errors.append(f"method {method!r} starts at round {start}, past the last round ({rounds}) of preset {preset!r}")
    tune_rounds = (spec.get("tune") or {}).get("rounds") or rounds
    if tune_rounds > rounds:
        errors.append(f"method {method!r} tunes for {tune_rounds} rounds, more than preset {preset!r} runs ({rounds})")
    return errors


def partition_errors(config: dict[str, Any]) -> list[str]:
    """Every (preset, dataset, partition) the tables and figures use, partitioned once on class-balanced stand-in
    labels of the dataset's size: parameter typos and impossible values (more classes per client than the dataset
    has, more clients than samples) fail here, before any job, not in the partition job."""
    combos = {
        (t["preset"], d, p) for t in config.get("tables", {}).values() for d in t["datasets"] for p in t["partitions"]
    }
    for fig in config.get("figures", {}).values():
        kind = FIGURE_KINDS[fig["kind"]]
        combos |= {(c["preset"], c["dataset"], c["partition"]) for c in kind.cells(fig)}
        combos |= {(preset, d, p) for preset, d, p, _, _ in kind.stages(fig, config["methods"])}
    errors = []
    for preset_name, dataset, partition in sorted(combos):
        try:
            preset = for_dataset(resolve_preset(config["presets"], preset_name), dataset, preset_name)
        except ValueError as err:
            errors.append(str(err))
            continue
        meta = DATASETS[dataset]
        n = meta.n_train or config.get("synthetic", {}).get("n_train", 2000)
        labels = np.arange(n) % meta.num_classes
        spec = dict(config["partitions"][partition])
        try:
            make_partition(
                labels,
                spec.pop("scheme"),
                preset.get("num_clients"),
                0,
                preset["local_test_fraction"],
                preset.get("avg_client_size"),
                **spec,
            )
        except (TypeError, ValueError) as err:
            errors.append(
                f"partition {partition!r} of {dataset} under preset {preset_name!r} "
                f"({preset.get('num_clients')} clients, {n} samples): {err}"
            )
    return errors


def preset_errors(presets: dict[str, Any], name: str, datasets: list[str]) -> list[str]:
    """A preset resolves (``base`` chain) to a complete, well-typed protocol for every dataset it is used with."""
    if name not in presets:
        return [f"unknown preset {name!r}; defined presets: {sorted(presets)}"]
    try:
        resolved = resolve_preset(presets, name)
        for d in datasets:
            FLConfig.from_preset(resolved, d, name=f"preset {name!r}")
    except ValueError as err:
        return [str(err)]
    return []


def parameter_errors(cls: type, params: dict[str, Any]) -> list[str]:
    """Unknown parameters, values of another type than the constructor's default, and the constructor's own
    checks (it raises ValueError)."""
    signature = inspect.signature(cls.__init__)
    errors = []
    for key, value in params.items():
        if key not in signature.parameters:
            valid = [p for p in signature.parameters if p != "self"]
            errors.append(f"unknown parameter {key!r} of {cls.name}; valid: {valid}")
            continue
        default = signature.parameters[key].default
        if isinstance(default, bool) or default is None or default is inspect.Parameter.empty:
            continue
        kinds = (int, float) if isinstance(default, float) else (type(default),)
        if not isinstance(value, kinds) or isinstance(value, bool):
            errors.append(f"{cls.name}: {key}={value!r} is not {type(default).__name__}")
    if not errors:
        try:
            cls(**params)
        except (TypeError, ValueError) as err:
            errors.append(f"bad parameters for {cls.name}: {err}")
    return errors


def checked_config(config: dict[str, Any], repo: str | Path) -> tuple[dict[str, Any], list[str]]:
    """The workflow config as every job sees it: ``config`` (config.yaml with its overlays) with each paper's file
    of ``repo/config/papers`` merged under it, booleans given as ``--config`` strings read as booleans, the schema's
    defaults set, and cross-checked by ``check_config``. Returns (config, warnings); raises ValueError naming every
    problem (the workflow turns it into an error before any job starts)."""
    from snakemake.utils import validate

    from fed.config import with_papers

    repo = Path(repo)
    merged = with_papers(copy.deepcopy(config), repo / "config" / "papers")  # the caller's config stays as it is
    for key in ("download", "warm_start", "retrain"):  # --config download=false arrives as the string "false"
        if str(merged.get(key)).lower() in ("true", "false"):
            merged[key] = str(merged[key]).lower() == "true"
    try:
        validate(merged, str(repo / "workflow" / "schemas" / "config.schema.yaml"))  # sets the schema's defaults
    except Exception as err:
        raise ValueError(schema_error(err)) from None
    for table in merged["tables"].values():  # a caption's opening words; optional, so a derived default
        table.setdefault("title", f"{table['paper']} {table['table']}")
    return merged, check_config(merged)


def checked_files(overlays: list[str | Path], repo: str | Path) -> tuple[dict[str, Any], list[str]]:
    """``checked_config`` of ``repo``'s config.yaml with ``overlays`` merged over it in order, as
    ``snakemake --configfile <overlays>`` merges them; a YAML error names the file and line."""
    from snakemake.utils import update_config

    from fed.config import load_yaml

    config = load_yaml(Path(repo) / "config.yaml")
    for path in overlays:
        if not Path(path).is_file():
            raise ValueError(f"no config file {path} (overlays are files, as for snakemake --configfile)")
        update_config(config, load_yaml(path))
    return checked_config(config, repo)


def schema_error(err: Exception) -> str:
    """Snakemake's schema-validation error, which prints the whole schema, as "key.path: what is wrong"."""
    text = str(err)
    what = re.search(r"ValidationError: (.*)", text)
    where = re.search(r"On instance((?:\[[^\]]*\])*):", text)
    key = ".".join(re.findall(r"\['?([^\]']*)'?\]", where[1])) if where and where[1] else "config"
    return number_hint(f"{key}: {what[1] if what else text.strip().splitlines()[-1]}")
