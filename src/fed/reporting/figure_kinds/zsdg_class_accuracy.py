"""Per-class accuracy of an FL model beside an oracle's accuracy on ZSDG images inverted from it (Fed-ZDA Fig. 3).
Cells: the source FL model per (dataset, seed); the oracle is a ``centralized_model`` stage of its own preset and
partition, in the same order."""

from __future__ import annotations

from fed.reporting.figure_kinds.common import CELLREF, STR, ZSDG, cell
from fed.stages import Stage

ORACLE = {
    "type": "object",
    "required": ["preset", "partition"],
    "additionalProperties": False,
    "properties": {"preset": STR, "partition": STR},
}
NEEDS_MODELS = True  # draw() reads the cells' model.pt

KEYS = {"source": (True, CELLREF), "oracle": (True, ORACLE), "zsdg": (False, ZSDG)}


def presets(fig):
    return [fig["source"]["preset"], fig["oracle"]["preset"]]


def cells(fig):
    src = fig["source"]
    return [cell(src["preset"], d, src["partition"], src["method"], s) for d in fig["datasets"] for s in fig["seeds"]]


def stages(fig, methods):
    oracle = fig["oracle"]
    return [
        (oracle["preset"], d, oracle["partition"], s, Stage.of("centralized_model"))
        for d in fig["datasets"]
        for s in fig["seeds"]
    ]


def draw(fig, cells, files, stages, png, csv, caption):
    from fed.reporting.figures import plot_zsdg_class_accuracy
    from fed.reporting.zsdg_figures import class_accuracy_table

    groups = [(c["dataset"], c["seed"], source, oracle) for c, source, oracle in zip(cells, files, stages)]
    df = class_accuracy_table(groups, fig.get("zsdg", {}))
    df.to_csv(csv, index=False)
    plot_zsdg_class_accuracy(df, png, caption)
