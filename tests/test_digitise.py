"""Values read off published charts: the reader recovers known values from a chart drawn here, the committed paper
values are what the committed figures give, and a verdict on a read value allows for its reading uncertainty."""

import csv
import hashlib
import io

import matplotlib
import pandas as pd
import pytest
import yaml

from fed.reporting import digitise
from fed.reporting.verdicts import verdict

matplotlib.use("Agg")


def draw_bars(path, values, ticks):
    """A grouped bar chart in the style of FedDPMS' figures: grey gridlines at ``ticks``, a legend below."""
    import matplotlib.pyplot as plt

    colours = {"A": "#4285f4", "B": "#ea4335"}
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    ax.set_ylim(ticks[0], ticks[-1])
    ax.set_yticks(ticks)
    ax.yaxis.grid(True, color="#d9d9d9", linewidth=2)
    ax.set_axisbelow(True)
    for s in ax.spines.values():
        s.set_visible(False)
    for j, (name, series) in enumerate(values.items()):
        ax.bar([g + 0.3 * j for g in range(len(series))], series, width=0.25, color=colours[name], label=name,
               bottom=0, antialiased=True)  # fmt: skip
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2, frameon=False)
    fig.savefig(path)
    plt.close(fig)


def test_the_reader_recovers_the_values_of_a_drawn_chart(tmp_path):
    truth = {"A": [0.62, 0.705, 0.77], "B": [0.655, 0.69, 0.79]}
    ticks = [0.6, 0.65, 0.7, 0.75, 0.8]
    draw_bars(tmp_path / "chart.png", truth, ticks)
    spec = {
        "image": "chart.png",
        "source": {"repository": "here", "path": "chart.png"},
        "sha256": hashlib.sha256((tmp_path / "chart.png").read_bytes()).hexdigest(),
        "kind": "bars",
        "grid_colour": [217, 217, 217],
        "y_ticks": ticks,
        "groups": [1, 2, 3],
        "series": [{"name": "A", "colour": [66, 133, 244]}, {"name": "B", "colour": [234, 67, 53]}],
        "scale": 100,
        **{"paper": "p", "table": "t", "dataset": "d", "partition": "g{group}", "metric": "global_acc"},
        "methods": {"A": "a", "B": "b"},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    rows = digitise.read_spec(tmp_path / "spec.yaml")
    assert [r["partition"] for r in rows[:3]] == ["g1", "g2", "g3"] and rows[0]["read_uncertainty"] < 0.2
    for r in rows:
        expected = 100 * truth[r["method"].upper()][int(r["partition"][1:]) - 1]
        assert r["value"] == pytest.approx(expected, abs=r["read_uncertainty"] + 0.01)
    spec["sha256"] = "0" * 64  # another file than the one the spec was written for
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ValueError, match="sha256"):
        digitise.read_spec(tmp_path / "spec.yaml")


def test_the_committed_paper_values_are_what_the_committed_figures_give(tmp_path):
    committed = (digitise.SPECS.parent / "feddpms.csv").read_text()
    digitise.main(["feddpms", "--out", str(tmp_path / "feddpms.csv")])
    assert (tmp_path / "feddpms.csv").read_text() == committed
    read = list(csv.DictReader(io.StringIO(committed)))
    rows = {(r["dataset"], r["partition"], r["method"]): float(r["value"]) for r in read if "β (" in r["table"]}
    # FMNIST at β = 0.1, as the bars show: FedDPMS ≈ 82 %, FedMix ≈ 81 %, FedAvg ≈ 79.5 %
    assert rows[("fmnist", "dir0.1", "feddpms")] == pytest.approx(82.1, abs=0.3)
    assert rows[("fmnist", "dir0.1", "fedmix")] == pytest.approx(81.2, abs=0.3)
    assert rows[("fmnist", "dir0.1", "fedavg")] == pytest.approx(79.5, abs=0.3)
    assert len(rows) == 3 * 5 * 5 and len(read) == 3 * 5 * 5 + 3 * 7  # the bars, and the curves' best values
    # the per-round curves behind the curves' values are committed as read
    for spec in sorted(digitise.SPECS.glob("feddpms_curves_*.yaml")):
        points = pd.read_csv(spec.with_suffix(".points.csv"))
        assert points.to_dict("records") == pd.DataFrame(digitise.read_points(spec)).to_dict("records")


def test_calibration_by_hand():
    # gridlines at rows 300 (value 0.8) and 100 (value 0.9): 0.0005 per pixel; row 200 is 0.85
    cal = digitise.calibrate([100.0, 300.0], [0.8, 0.9])
    assert cal.value(200) == pytest.approx(0.85) and cal.per_pixel == pytest.approx(0.0005) and cal.residual < 1e-12
    with pytest.raises(ValueError, match="3 ticks"):
        digitise.calibrate([100.0, 300.0], [0.8, 0.9, 1.0])


def test_a_verdict_on_a_value_read_from_a_figure_allows_for_the_reading():
    # paper 80.0 (read ± 0.3), ours 82.2 ± 0 over 3 seeds: 2.2 pp is past the 2-pp floor, within floor + reading
    assert verdict(82.2, 0.0, 3, 0, 80.0, float("nan")) == "above paper"
    assert verdict(82.2, 0.0, 3, 0, 80.0, float("nan"), read_uncertainty=0.3) == "reproduced (read from a figure, ±0.3)"
    assert (
        verdict(77.6, 0.0, 3, 0, 80.0, float("nan"), read_uncertainty=0.3) == "below paper (read from a figure, ±0.3)"
    )


def test_the_reader_follows_the_lines_of_a_drawn_chart_past_a_legend_and_a_hidden_tick(tmp_path):
    """Three rising curves (one dash-dotted, one crossing another) in matplotlib's default frame, a legend inside
    the plot, and a vertical line over one x tick mark: each curve's best value is read to within its uncertainty."""
    import matplotlib.pyplot as plt
    import numpy as np

    x = np.arange(1, 51)
    truth = {
        "A": 0.6 + 0.27 * (1 - np.exp(-x / 6)),
        "B": 0.62 + 0.24 * (1 - np.exp(-x / 9)) + 0.004 * np.sin(x / 3),
        "C": 0.58 + 0.26 * (1 - np.exp(-x / 4)),
    }
    colours = {"A": "#ffa500", "B": "#000000", "C": "#0000ff"}
    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)
    for name, y in truth.items():
        ax.plot(x, y, color=colours[name], linestyle="-." if name == "B" else "-", label=name)
    ax.plot([20, 20], [0.5, 0.84], "--", color="#ec1c24", linewidth=2)  # a marker line over the x = 20 tick
    ax.set_xlim(-1.45, 52.45)
    ax.set_ylim(0.5, 0.9)
    ax.set_xticks([0, 10, 20, 30, 40, 50])
    ax.set_yticks([0.5, 0.6, 0.7, 0.8, 0.9])
    ax.legend(loc="lower right")
    fig.savefig(tmp_path / "lines.png")
    plt.close(fig)
    spec = {
        "image": "lines.png",
        "source": {"repository": "here", "path": "lines.png"},
        "sha256": hashlib.sha256((tmp_path / "lines.png").read_bytes()).hexdigest(),
        "kind": "lines",
        "x_ticks": [0, 10, 20, 30, 40, 50],
        "y_ticks": [0.5, 0.6, 0.7, 0.8, 0.9],
        "x_values": [1, 50],
        "series": [
            {"name": "A", "colour": [255, 165, 0]},
            {"name": "B", "colour": [0, 0, 0]},
            {"name": "C", "colour": [0, 0, 255]},
        ],  # fmt: skip
        "scale": 100,
        **{"paper": "p", "table": "t", "dataset": "d", "partition": "dir0.5", "metric": "global_acc"},
        "methods": {"A": "a", "B": "b", "C": "c"},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    rows = digitise.read_spec(tmp_path / "spec.yaml")
    for r in rows:
        best = 100 * truth[r["method"].upper()].max()
        assert r["value"] == pytest.approx(best, abs=r["read_uncertainty"] + 0.1), r
    points = digitise.read_points(tmp_path / "spec.yaml")
    late = [p for p in points if p["series"] == "B" and p["x"] >= 45]
    assert late and all(abs(p["value"] - 100 * truth["B"][p["x"] - 1]) < 1.0 for p in late)  # not the legend's text
