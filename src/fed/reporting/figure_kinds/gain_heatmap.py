"""A metric's gain over a baseline as a heat map, methods × regimes (and over all regimes): the mean paired
difference to the baseline over seeds, annotated with the number and * where it is significant after Holm. The
statistics are a leaderboard's (``fed.reporting.leaderboard``), so over the methods, regimes and seeds of a
``layout: leaderboard`` table the figure shows that table's numbers for its ``metric``."""

from __future__ import annotations

import json
from pathlib import Path

from fed.metrics import METRICS
from fed.reporting.figure_kinds.common import GRID_KEYS, LABELS, STR, grid_cells
from fed.reporting.leaderboard import ALL, DEFAULT_BASELINE, gains, higher_is_better, leaderboard, regime_label
from fed.reporting.tables import collect_runs

KEYS = {
    **GRID_KEYS,
    "metric": (False, {"enum": list(METRICS), "description": "the metric whose gain is drawn (default global_acc)"}),
    "baseline": (
        False,
        {**STR, "description": f"the method the others are compared with (default {DEFAULT_BASELINE})"},
    ),
    "labels": LABELS,
}


def cells(fig):
    baseline = fig.get("baseline", DEFAULT_BASELINE)
    if baseline not in fig["methods"]:
        raise ValueError(f"baseline {baseline!r} is not among the figure's methods {fig['methods']}")
    return grid_cells(fig)


def draw(fig, cells, files, stages, png, csv, caption):
    from fed.reporting.figures import plot_gain_heatmap

    metric, baseline = fig.get("metric", "global_acc"), fig.get("baseline", DEFAULT_BASELINE)
    protocol = json.loads(Path(files[0][0]).read_text())["config"]["report"]  # one preset: one protocol
    runs = collect_runs([dict(c, path=metrics) for c, (metrics, _) in zip(cells, files)])
    board = leaderboard(runs, fig["datasets"], fig["partitions"], fig["methods"], [metric], protocol, baseline)
    labels = fig.get("labels", {})
    df = gains(board, metric).assign(protocol=protocol)
    df.insert(4, "label", [labels.get(m, m) for m in df.method])
    df.to_csv(csv, index=False)
    several = len(fig["datasets"]) > 1
    regimes = [regime_label(d, p, several) for d in fig["datasets"] for p in fig["partitions"]] + [ALL]
    rows = [labels.get(m, m) for m in fig["methods"] if m != baseline]
    plot_gain_heatmap(df, rows, regimes, metric, higher_is_better(metric), png, caption)
