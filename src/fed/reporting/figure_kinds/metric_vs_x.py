"""A metric against a number attached to the cells, mean ± std over seeds, one panel per dataset. The number belongs
to each cell's partition (``x_of: partition``, one line per method: FedDPMS' "test accuracy vs concentration
parameter" β) or to its method (``x_of: method``, one line per partition: FedDPMS' accuracy vs the number of
preliminary rounds). The value per cell is the one its preset reports (``report``: last or best round)."""

from __future__ import annotations

import json

import pandas as pd

from fed.reporting.figure_kinds.common import STR, grid_cells

KEYS = {
    "preset": (True, STR),
    "partitions": (True, {"type": "array", "items": STR, "minItems": 1}),
    "methods": (True, {"type": "array", "items": STR, "minItems": 1}),
    "x_of": (False, {"enum": ["partition", "method"]}),
    "x_values": (True, {"type": "object", "additionalProperties": {"type": "number"}, "description": "name -> x"}),
    "x_label": (False, STR),
    "metric": (False, STR),
    "labels": (False, {"type": "object", "additionalProperties": STR, "description": "line -> legend label"}),
}


def cells(fig):
    x_of = fig.get("x_of", "partition")
    missing = set(fig[f"{x_of}s"]) - set(fig["x_values"])
    if missing:
        raise ValueError(f"figure {fig['output']}: x_values has no value for the {x_of}s {sorted(missing)}")
    return grid_cells(fig)


def draw(fig, cells, files, stages, png, csv, caption):
    from fed.reporting.figures import plot_metric_vs_x

    metric, x_of = fig.get("metric", "global_acc"), fig.get("x_of", "partition")
    line_of = "method" if x_of == "partition" else "partition"
    rows = []
    for c, (metrics, _) in zip(cells, files):
        rec = json.loads(open(metrics).read())
        report = rec["config"]["report"]
        rows.append(
            {
                **{k: c[k] for k in ("dataset", "partition", "method", "seed")},
                "x": fig["x_values"][c[x_of]],
                "line": fig.get("labels", {}).get(c[line_of], c[line_of]),
                "report": report,
                metric: rec[report].get(metric),
                "diverged": rec["diverged"],
            }
        )
    df = pd.DataFrame(rows)
    df.to_csv(csv, index=False)
    plot_metric_vs_x(df, metric, fig.get("x_label", x_of), png, caption)
