"""Registry of figure kinds: one module per kind, holding the config keys it takes, the cells it reads and how it
draws them. The workflow (``common.smk``) asks a kind for its cells; ``workflow/scripts/figure.py`` asks it to draw.

A kind module defines
- ``KEYS``: its config keys beyond the common ones: name → (required, JSON schema of the value);
- ``presets(fig)``: the presets its cells use (validated before any job);
- ``variants(fig, methods)``: method variants it needs that the config does not name (e.g. start-round variants);
- ``cells(fig)``: the cells it reads, in the order ``draw`` receives their files;
- ``stages(fig, methods)``: preparatory stages it reads, as (preset, dataset, partition, seed, Stage), e.g. an oracle
  or the DP-CGANs of configured ``methods``;
- ``NEEDS_MODELS``: whether ``draw`` reads the cells' ``model.pt`` (if not, it can draw from committed metrics);
- ``draw(fig, cells, files, stages, png, csv, caption)``: files are (metrics.json, model.pt or None) per cell,
  stages the stage files in ``stages(fig)`` order.
"""

from __future__ import annotations

from types import ModuleType

import jsonschema

from fed.reporting.figure_kinds import (
    accuracy_curves,
    dp_samples,
    dpms_samples,
    metric_vs_x,
    stage_cost,
    start_round_variance,
    zsdg_class_accuracy,
    zsdg_grids,
)
from fed.reporting.figure_kinds.common import COMMON_KEYS, cell

FIGURE_KINDS: dict[str, ModuleType] = {
    "accuracy_curves": accuracy_curves,
    "dp_samples": dp_samples,
    "dpms_samples": dpms_samples,
    "metric_vs_x": metric_vs_x,
    "stage_cost": stage_cost,
    "start_round_variance": start_round_variance,
    "zsdg_class_accuracy": zsdg_class_accuracy,
    "zsdg_grids": zsdg_grids,
}


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
