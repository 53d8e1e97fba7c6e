"""A per-round metric against the communication round, one line per method (mean ± std over seeds), one panel per
(dataset, partition): global test accuracy in DA-FL Fig. 4 (all methods) and Fig. 6 (sharing ratios γ) and FLea
Fig. 6 (FedMix vs FLea); any other history column with ``metric`` (FLea Fig. 9: exposure ε(t), distance
correlation ρ)."""

from __future__ import annotations

import json

import pandas as pd

from fed.reporting.figure_kinds.common import GRID_KEYS, LABELS, STR

KEYS = {
    **GRID_KEYS,  # a method name equal to another method's spec reads that method's cell
    "labels": LABELS,
    "metric": (False, {**STR, "description": "history column to plot (default global_acc)"}),
}


def draw(fig, cells, files, stages, png, csv, caption):
    from fed.reporting.figures import plot_accuracy_curves

    metric = fig.get("metric", "global_acc")
    rows = []
    for c, (metrics, _) in zip(cells, files):
        rec = json.loads(open(metrics).read())
        label = fig.get("labels", {}).get(c["method"], c["method"])
        for row in rec["history"]:
            if row.get(metric) is not None:
                rows.append(
                    {
                        **{k: c[k] for k in ("dataset", "partition", "seed")},
                        "method": label,
                        "round": row["round"],
                        metric: row[metric],
                        "diverged": rec["diverged"],
                    }
                )
    if not rows:
        raise ValueError(f"figure {fig['output']}: no cell's history has {metric!r}")
    df = pd.DataFrame(rows)
    df.to_csv(csv, index=False)
    plot_accuracy_curves(df, png, caption, metric)
