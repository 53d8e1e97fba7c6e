"""A metric against a number attached to the cells, mean ± std over seeds, one panel per dataset. The number belongs
to each cell's partition (``x_of: partition``, one line per method: FedDPMS' "test accuracy vs concentration
parameter" β) or to its method (``x_of: method``, one line per partition: FedDPMS' accuracy vs the number of
preliminary rounds; FLea's accuracy vs Beta(a, a) and vs λ1, λ2; or one line per ``series`` of methods: FLea Fig. 6's
FedMix and FLea against the proportion of shared augmentations). The value per cell is the one its preset reports
(``report``: last or best round), or with ``value: mean_over_rounds`` the mean over every evaluated round (FLea
Fig. 11's ρ̄, "the expectation of the distance correlation").

Optional: a ``reference`` method drawn as a horizontal band (FLea Fig. 10's FedAvg "without mix-up"),
``x_density: beta_symmetric``, a left panel with the densities of Beta(x, x) for the swept x (Fig. 10, left), and
``paper_table`` (``x_of: partition``): the paper's values of that table (``fed/reporting/data/<paper>.csv``) drawn
beside each line, dashed, at every partition ``x_values`` names (FedDPMS' chart beside the cells run so far)."""

from __future__ import annotations

import json

import pandas as pd

from fed.reporting.figure_kinds.common import GRID_KEYS, LABELS, STR, cell, grid_cells

KEYS = {
    **GRID_KEYS,
    "x_of": (False, {"enum": ["partition", "method"]}),
    "x_values": (True, {"type": "object", "additionalProperties": {"type": "number"}, "description": "name -> x"}),
    "x_label": (False, STR),
    "metric": (False, STR),
    "labels": LABELS,
    "value": (False, {"enum": ["reported", "mean_over_rounds"]}),
    "series": (
        False,
        {"type": "object", "additionalProperties": STR, "description": "method -> line (x_of: method)"},
    ),
    "reference": (False, {**STR, "description": "a method drawn as a horizontal band, mean ± std over seeds"}),
    "x_density": (False, {"enum": ["beta_symmetric"], "description": "a left panel with the densities x sets"}),
    "paper_table": (False, {**STR, "description": "the paper's table whose values are drawn beside each line"}),
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
    if (series := fig.get("series")) is not None:
        if x_of != "method" or set(fig["methods"]) - set(series):
            raise ValueError(f"figure {fig['output']}: series needs x_of: method and a line for every method")
    if "paper_table" in fig:
        paper_rows(fig, fig.get("metric", "global_acc"))  # a table the paper lacks fails here, before any job
    reference = [
        cell(fig["preset"], d, p, fig["reference"], s)
        for d in fig["datasets"]
        for p in fig["partitions"]
        for s in fig["seeds"]
        if "reference" in fig
    ]
    return grid_cells(fig) + reference


def paper_rows(fig, metric: str) -> list[dict]:
    """The paper's ``metric`` in ``fig["paper_table"]`` for the figure's datasets and methods, at every partition of
    ``x_values``: one row each, role "paper", on its method's line."""
    from fed.reporting.tables import paper_values

    if fig.get("x_of", "partition") != "partition":
        raise ValueError(f"figure {fig['output']}: paper_table needs x_of: partition")
    published = paper_values(fig["paper"])
    published = published[(published.table == fig["paper_table"]) & (published.metric == metric)]
    if published.empty:
        raise ValueError(f"figure {fig['output']}: {fig['paper']} has no {metric} in table {fig['paper_table']!r}")
    keep = published.dataset.isin(fig["datasets"]) & published.method.isin(fig["methods"])
    return [
        {
            "dataset": r.dataset,
            "partition": r.partition,
            "method": r.method,
            "seed": None,
            "x": fig["x_values"][r.partition],
            "line": fig.get("labels", {}).get(r.method, r.method),
            "role": "paper",
            "report": "paper",
            metric: float(r.value),
            "diverged": False,
        }
        for r in published[keep & published.partition.isin(fig["x_values"])].itertuples()
    ]


def line_of(fig, c: dict) -> str:
    """The line a cell belongs to (its legend entry)."""
    if c["method"] == fig.get("reference") or fig.get("x_of", "partition") == "partition":
        return fig.get("labels", {}).get(c["method"], c["method"])
    if "series" in fig:
        return fig["series"][c["method"]] + (f", {c['partition']}" if len(fig["partitions"]) > 1 else "")
    return fig.get("labels", {}).get(c["partition"], c["partition"])


def draw(fig, cells, files, stages, png, csv, caption):
    from fed.reporting.figures import plot_metric_vs_x

    metric, x_of, value = fig.get("metric", "global_acc"), fig.get("x_of", "partition"), fig.get("value", "reported")
    rows = []
    for c, (metrics, _) in zip(cells, files):
        rec = json.loads(open(metrics).read())
        is_reference = c["method"] == fig.get("reference")
        rows.append(
            {
                **{k: c[k] for k in ("dataset", "partition", "method", "seed")},
                "x": None if is_reference else fig["x_values"][c[x_of]],
                "line": line_of(fig, c),
                "role": "reference" if is_reference else "sweep",
                "report": rec["config"]["report"] if value == "reported" else value,
                metric: cell_value(rec, metric, value),
                "diverged": rec["diverged"],
            }
        )
    if "paper_table" in fig:
        rows += paper_rows(fig, metric)
    df = pd.DataFrame(rows)
    df.to_csv(csv, index=False)
    density = sorted(set(fig["x_values"].values())) if fig.get("x_density") else None
    plot_metric_vs_x(df, metric, fig.get("x_label", x_of), png, caption, beta_density=density)
