"""Per-class accuracy of an FL model beside an oracle's accuracy on ZSDG images inverted from it (Fed-ZDA Fig. 3).
Cells: per (dataset, seed) the source FL model, then the oracle."""

from __future__ import annotations

from fed.reporting.figure_kinds.common import CELLREF, ZSDG, cell

KEYS = {"source": (True, CELLREF), "oracle": (True, CELLREF), "zsdg": (False, ZSDG)}


def presets(fig):
    return [fig["source"]["preset"], fig["oracle"]["preset"]]


def variants(fig, methods):
    return {}


def cells(fig):
    return [
        cell(ref["preset"], d, ref["partition"], ref["method"], s)
        for d in fig["datasets"]
        for s in fig["seeds"]
        for ref in (fig["source"], fig["oracle"])
    ]


def draw(fig, cells, files, png, csv, caption):
    from fed.reporting.figures import plot_zsdg_class_accuracy
    from fed.reporting.zsdg_figures import class_accuracy_table

    groups = [(c["dataset"], c["seed"], files[i], files[i + 1]) for i, c in enumerate(cells) if i % 2 == 0]
    df = class_accuracy_table(groups, fig.get("zsdg", {}))
    df.to_csv(csv, index=False)
    plot_zsdg_class_accuracy(df, png, caption)
