"""Figure kinds on constructed cells: the numbers they plot (their CSV), not the pixels."""

import json

import pandas as pd
import pytest

from fed.reporting.figure_kinds import FIGURE_KINDS


def record(report: str, history: list[dict]) -> dict:
    best = max((r for r in history if r.get("global_acc") is not None), key=lambda r: r["global_acc"])
    return {"config": {"report": report}, "best": best, "last": history[-1], "history": history, "diverged": False}


@pytest.mark.parametrize("value", ["reported", "mean_over_rounds"])
def test_metric_vs_x_plots_the_reported_round_or_the_mean_over_rounds(tmp_path, value):
    kind = FIGURE_KINDS["metric_vs_x"]
    fig = {
        "output": "t/fig11",
        "preset": "p",
        "datasets": ["d"],
        "partitions": ["qua3"],
        "methods": ["flea_l0", "flea_l3"],
        "seeds": [0],
        "x_of": "method",
        "x_values": {"flea_l0": 0, "flea_l3": 3},
        "metric": "flea_dcor_shared",
        "value": value,
    }
    cells = kind.cells(fig)
    rho = {"flea_l0": [0.9, 0.8, 0.7], "flea_l3": [0.6, 0.5, 0.1]}
    acc = [50.0, 70.0, 60.0]  # the best round is round 2
    files = []
    for c in cells:
        history = [{"round": r + 1, "global_acc": acc[r], "flea_dcor_shared": rho[c["method"]][r]} for r in range(3)]
        path = tmp_path / f"{c['method']}.json"
        path.write_text(json.dumps(record("best", history)))
        files.append((path, None))
    kind.draw(fig, cells, files, [], tmp_path / "f.png", tmp_path / "f.csv", "caption")
    got = pd.read_csv(tmp_path / "f.csv").set_index("x")["flea_dcor_shared"]
    want = {0: 0.8, 3: 0.5} if value == "reported" else {0: 0.8, 3: 0.4}
    assert got.to_dict() == pytest.approx(want)
    assert (tmp_path / "f.png").stat().st_size > 0
