"""A per-round metric against the communication round, one line per method (mean ± std over seeds), one panel per
(dataset, partition): global test accuracy in DA-FL Fig. 4 (all methods) and Fig. 6 (sharing ratios γ) and FLea
Fig. 6 (FedMix vs FLea); any other history column with ``metric`` (FLea Fig. 9: exposure ε(t), distance
correlation ρ). ``per_seed`` draws a line per seed instead (a seed study), ``paper_table`` the paper's number of
each panel and method as a horizontal line (DA-FL's seed studies beside Table 3)."""

from __future__ import annotations

import json

import pandas as pd

from fed.reporting.figure_kinds.common import GRID_KEYS, LABELS, STR, grid_cells

KEYS = {
    **GRID_KEYS,  # a method name equal to another method's spec reads that method's cell
    "labels": LABELS,
    "metric": (False, {**STR, "description": "history column to plot (default global_acc)"}),
    "per_seed": (False, {"type": "boolean", "description": "a line per seed, not the mean ± std over seeds"}),
    "paper_table": (
        False,
        {**STR, "description": "the paper's table whose number per panel and method (its label) is drawn across"},
    ),
}


def cells(fig):
    if "paper_table" in fig:
        paper_lines(fig)  # a table the paper lacks fails here, before any job
    return grid_cells(fig)


def paper_lines(fig) -> pd.DataFrame:
    """The paper's ``metric`` in ``fig["paper_table"]`` per (dataset, partition, method label) of the figure's grid;
    a number the paper gives for every partition at once (DA-FL's centralized bound) goes to each of them."""
    from fed.reporting.tables import paper_values

    metric = fig.get("metric", "global_acc")
    published = paper_values(fig["paper"])
    published = published[(published.table == fig["paper_table"]) & (published.metric == metric)]
    if published.empty:
        raise ValueError(f"figure {fig['output']}: {fig['paper']} has no {metric} in table {fig['paper_table']!r}")
    value = {(r.dataset, r.partition, r.method): float(r.value) for r in published.itertuples()}
    rows = []
    for d in fig["datasets"]:
        for p in fig["partitions"]:
            for m in fig["methods"]:
                label = fig.get("labels", {}).get(m, m)
                if (found := value.get((d, p, label), value.get((d, "", label)))) is not None:
                    rows.append({"dataset": d, "partition": p, "method": label, "paper_value": found})
    return pd.DataFrame(rows, columns=["dataset", "partition", "method", "paper_value"])


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
    paper = paper_lines(fig) if "paper_table" in fig else None
    if paper is not None:
        df = df.merge(paper, on=["dataset", "partition", "method"], how="left")
    df.to_csv(csv, index=False)
    plot_accuracy_curves(df, png, caption, metric, per_seed=fig.get("per_seed", False))
