"""Cross-checks of a schema-valid workflow config against the package's registries (names, parameters, ranges).

Lives above ``fed.config`` (which holds only types), so that nothing below imports the registries.
"""

from __future__ import annotations

from typing import Any

from fed.algorithms import ALGORITHMS, PLANNED
from fed.data import DATASETS, PARTITIONS
from fed.models import MODELS


def check_config(config: dict[str, Any]) -> list[str]:
    """Cross-check a schema-valid workflow config; returns warnings, raises ValueError listing every error."""
    errors: list[str] = []
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
            try:
                ALGORITHMS[algo](**{k: v for k, v in spec.items() if k != "algorithm"})
            except TypeError as err:
                errors.append(f"method {name!r}: bad parameters for {algo}: {err}")
    for name, spec in partitions.items():
        if spec["scheme"] not in PARTITIONS:
            errors.append(f"partition {name!r}: unknown scheme {spec['scheme']!r}; valid choices: {sorted(PARTITIONS)}")
    for name, preset in presets.items():
        models = preset.get("model", {})
        for m in models.values() if isinstance(models, dict) else [models]:
            if m not in MODELS:
                errors.append(f"preset {name!r}: unknown model {m!r}; valid choices: {sorted(MODELS)}")
    for ename, exp in config.get("experiments", {}).items():
        where = f"experiment {ename!r}"
        if exp["preset"] not in presets:
            errors.append(f"{where}: unknown preset {exp['preset']!r}; defined presets: {sorted(presets)}")
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
    if errors:
        raise ValueError("invalid config:\n  - " + "\n  - ".join(errors))
    return warnings
