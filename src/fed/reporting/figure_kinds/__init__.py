"""Registry of figure kinds: one module per kind, holding the config keys it takes, the cells it reads and how it
draws them. The grid (``fed.grid``) asks a kind for its cells; ``workflow/scripts/figure.py`` asks it to draw.

A kind module defines
- ``KEYS``: its config keys beyond the common ones: name → (required, JSON schema of the value);
- ``draw(fig, cells, files, stages, png, csv, caption)``: files are (metrics.json, model.pt or None) per cell,
  stages the stage files in ``stages(fig)`` order;
and, where the default (in brackets) does not fit,
- ``presets(fig)``: the presets its cells use, validated before any job [``[fig["preset"]]``];
- ``variants(fig, methods)``: method variants it needs that the config does not name, e.g. start-round variants [none];
- ``cells(fig)``: the cells it reads, in the order ``draw`` receives their files [datasets × partitions × methods ×
  seeds of ``fig["preset"]``];
- ``stages(fig, methods)``: preparatory stages it reads, as (preset, dataset, partition, seed, Stage), e.g. an oracle
  or the DP-CGANs of configured ``methods`` [none];
- ``NEEDS_MODELS``: whether ``draw`` reads the cells' ``model.pt``; if not, it draws from committed metrics [False];
- ``NEEDS_DATA``: whether ``draw`` reads the cells' prepared datasets, passed as ``data`` (one tensors.pt per cell)
  [False].
"""

from __future__ import annotations

import importlib
from types import ModuleType, SimpleNamespace

import jsonschema

from fed.reporting.figure_kinds.common import COMMON_KEYS, cell, grid_cells

DEFAULTS = {
    "presets": lambda fig: [fig["preset"]],
    "variants": lambda fig, methods: {},
    "cells": grid_cells,
    "stages": lambda fig, methods: [],
    "NEEDS_MODELS": False,
    "NEEDS_DATA": False,
}


def _kind(module: ModuleType) -> SimpleNamespace:
    """A kind's interface: what its module defines, the defaults for the rest."""
    names = (*DEFAULTS, "KEYS", "draw")
    return SimpleNamespace(**{name: getattr(module, name, DEFAULTS.get(name)) for name in names})


NAMES = (
    "accuracy_curves",
    "context_attack",
    "dp_samples",
    "dpms_samples",
    "feature_separability",
    "flea_batch",
    "gain_heatmap",
    "metric_vs_x",
    "reconstruction_attack",
    "stage_cost",
    "start_round_variance",
    "zsdg_class_accuracy",
    "zsdg_grids",
)
FIGURE_KINDS: dict[str, SimpleNamespace] = {n: _kind(importlib.import_module(f"{__name__}.{n}")) for n in NAMES}


def key_errors(name: str, fig: dict) -> list[str]:
    """Unknown, missing or ill-typed keys of a figure entry, against its kind's ``KEYS``."""
    kind = FIGURE_KINDS.get(fig.get("kind"))
    if kind is None:
        return [f"figure {name!r}: unknown kind {fig.get('kind')!r}; valid choices: {sorted(FIGURE_KINDS)}"]
    keys = COMMON_KEYS | kind.KEYS
    errors = [
        f"figure {name!r}: unknown key {k!r} for kind {fig['kind']}; valid keys: {sorted(keys)}"
        for k in fig
        if k not in keys
    ]
    errors += [f"figure {name!r}: missing key {k!r}" for k, (required, _) in keys.items() if required and k not in fig]
    for k, (_, schema) in keys.items():
        if k in fig:
            try:
                jsonschema.validate(fig[k], schema)
            except jsonschema.ValidationError as err:
                errors.append(f"figure {name!r}: {k}: {err.message}")
    return errors


__all__ = ["FIGURE_KINDS", "cell", "key_errors"]
