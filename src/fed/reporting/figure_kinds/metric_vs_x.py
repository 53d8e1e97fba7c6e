"""A metric against a number attached to the cells, mean ± std over seeds, one panel per dataset. The number belongs
to each cell's partition (``x_of: partition``, one line per method: FedDPMS' "test accuracy vs concentration
parameter" β) or to its method (``x_of: method``, one line per partition: FedDPMS' accuracy vs the number of
preliminary rounds; FLea's accuracy vs Beta(a, a) and vs λ1, λ2). The value per cell is the one its preset reports
(``report``: last or best round), or with ``value: mean_over_rounds`` the mean over every evaluated round (FLea
Fig. 11's ρ̄, "the expectation of the distance correlation")."""

from __future__ import annotations

import json

import pandas as pd

from fed.reporting.figure_kinds.common import GRID_KEYS, LABELS, STR, grid_cells

KEYS = {
    **GRID_KEYS,
    "x_of": (False, {"enum": ["partition", "method"]}),
    "x_values": (True, {"type": "object", "additionalProperties": {"type": "number"}, "description": "name -> x"}),
    "x_label": (False, STR),
    "metric": (False, STR),
    "labels": LABELS,
    "value": (False, {"enum": ["reported", "mean_over_rounds"]}),
}


def cell_value(record: dict, metric: str, value: str = "reported"):
    """The cell's ``metric`` at the round its preset reports, or averaged over the rounds that recorded it."""
    if value == "reported":
        return record[record["config"]["report"]].get(metric)
    seen = [row[metric] for row in record["history"] if row.get(metric) is not None]
    return sum(seen) / len(seen) if seen else None


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
        value = fig.get("value", "reported")
        rows.append(
            {
                **{k: c[k] for k in ("dataset", "partition", "method", "seed")},
                "x": fig["x_values"][c[x_of]],
                "line": fig.get("labels", {}).get(c[line_of], c[line_of]),
                "report": rec["config"]["report"] if value == "reported" else value,
                metric: cell_value(rec, metric, value),
                "diverged": rec["diverged"],
            }
        )
    df = pd.DataFrame(rows)
    df.to_csv(csv, index=False)
    plot_metric_vs_x(df, metric, fig.get("x_label", x_of), png, caption)
