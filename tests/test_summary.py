"""The report's opening page counts every cell's verdict and lists every claim."""

import numpy as np
import pandas as pd
from docutils.core import publish_parts

from fed.reporting.summary import paper_counts, summary_markdown, summary_rst, verdict_counts


def test_verdict_counts_and_rst_render():
    table = pd.DataFrame({"verdict": ["reproduced", "below paper", "below paper", "not comparable (12 of 100 rounds)"]})
    counts = verdict_counts([("fedzda", "fedzda/table1", table)])
    row = counts.iloc[0]
    assert (row["cells"], row["reproduced"], row["below paper"], row["not comparable"], row["above paper"]) == (
        4,
        1,
        2,
        1,
        0,
    )
    assert row["no paper value"] == 0  # always a column, like the four verdicts that compare
    assert "diverged" not in counts.columns  # shown only where some cell diverged
    claims = pd.DataFrame(
        [
            {
                "claim": "c1",
                "statement": 'A "quoted" {#claim}',
                "verdict": "contradicted",
                "evidence": "p=0.01",
                "setting": "paper protocol",
            }
        ]
    )
    rst = summary_rst(counts, {"fedzda": claims})
    assert rst.startswith("{% raw %}") and rst.rstrip().endswith("{% endraw %}")  # Snakemake renders it with Jinja
    body = rst.removeprefix("{% raw %}").rstrip().removesuffix("{% endraw %}")
    body += "\n\n.. _summary.png: javascript:app.showResultInfo('x')\n"  # the link target Snakemake appends
    html = publish_parts(body, writer="html", settings_overrides={"report_level": 2, "halt_level": 2})["html_body"]
    assert "Table cells per verdict" in html and "c1" in html and "contradicted" in html
    assert "showResultInfo" in html  # the picture's link resolves


def test_paper_counts_sum_a_papers_tables():
    """The summary's first table: per paper, the cells of all its tables per verdict."""
    t1 = pd.DataFrame({"verdict": ["reproduced", "below paper", "no paper value"]})
    t2 = pd.DataFrame({"verdict": ["reproduced", "above paper (read from a figure)"]})
    t3 = pd.DataFrame({"verdict": ["not comparable (10 of 50 rounds)", "no runs"]})
    counts = verdict_counts([("dafl", "dafl/table3", t1), ("dafl", "dafl/table4", t2), ("flea", "flea/t1", t3)])
    per_paper = paper_counts(counts).set_index("paper")
    assert per_paper.loc["dafl", ["cells", "reproduced", "above paper", "below paper", "no paper value"]].tolist() == [
        5,
        2,
        1,
        1,
        1,
    ]
    assert per_paper.loc["flea", ["cells", "not comparable", "no runs"]].tolist() == [2, 1, 1]
    md = summary_markdown(counts, {})
    assert md.index("per paper") < md.index("Per table") < md.index("dafl/table3")


def test_compared_cells_keep_what_was_compared_with_ours_minus_the_paper():
    """The summary's picture draws the cells reproduced, above or below (the verdict's detail dropped) with their
    table's own name; not comparable, no paper value and no runs are counted on the page, not drawn."""
    from fed.reporting.summary import compared_cells

    t3 = pd.DataFrame(
        {
            "dataset": ["fmnist"] * 4,
            "partition": ["1-label", "1-label", "2-label", "2-label"],
            "method": ["fedavg", "dafl", "fedavg", "dafl"],
            "metric": ["global_acc"] * 4,
            "paper_value": [39.13, 75.11, 69.92, float("nan")],
            "ours_mean": [52.95, 63.64, 70.5, 78.0],
            "ours_std": [float("nan"), 1.5, float("nan"), float("nan")],
            "seeds": [1, 3, 1, 1],
            "delta": [13.82, -11.47, 0.58, float("nan")],
            "verdict": ["above paper", "below paper (read from a figure, ±0.2)", "reproduced", "no paper value"],
        }
    )
    quick = t3.assign(verdict="not comparable (10 of 50 rounds)")
    cells = compared_cells([("dafl", "dafl/table3", t3), ("dafl", "dafl/quick", quick)], {"dafl/table3": "Table 3"})
    assert cells.verdict.tolist() == ["above paper", "below paper", "reproduced"]
    assert cells.label.tolist() == ["Table 3"] * 3 and cells.delta.tolist() == [13.82, -11.47, 0.58]
    assert cells.ours_std.iloc[1] == 1.5 and cells.seeds.tolist() == [1, 3, 1]
    assert compared_cells([("dafl", "dafl/quick", quick)]).empty


def test_the_summary_picture_puts_each_cell_at_ours_minus_the_paper_in_its_verdict_s_colour(monkeypatch, tmp_path):
    """One row per paper, table and metric (accuracies and variances in panels of their own, the first row on top),
    each point at its delta in its verdict's colour, ± our std only where several seeds ran, the row's counts."""
    from fed.reporting import figures
    from fed.reporting.summary import CELL_COLUMNS

    rows = [
        ("fedzda", "Table 1", "local_acc_mean", -1.5, 3.0, 3, "reproduced"),
        ("fedzda", "Table 1", "client_acc_variance", -140.0, 90.0, 3, "below paper"),
        ("fedzda", "Table 1", "local_acc_mean", -5.0, 1.0, 3, "below paper"),
        ("dafl", "Table 3", "global_acc", 13.8, 0.5, 1, "above paper"),
    ]
    keys = ["paper", "label", "metric", "delta", "ours_std", "seeds", "verdict"]
    cells = pd.DataFrame([dict(zip(keys, r)) for r in rows]).reindex(columns=CELL_COLUMNS)
    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda fig, out: drawn.setdefault("fig", fig))
    figures.plot_verdict_deltas(cells, tmp_path / "s.png", "t")
    accuracy, variance = drawn["fig"].axes
    assert [t.get_text() for t in accuracy.get_yticklabels()] == [
        "fedzda · Table 1 · local_acc_mean",
        "dafl · Table 3 · global_acc",
    ]
    assert accuracy.get_ylim()[0] > accuracy.get_ylim()[1]  # the first row on top
    points = {}  # (x, y) → (colour, x error)
    for container in accuracy.containers + variance.containers:
        line, _, bars = container.lines
        (x,), (y,) = line.get_xdata(), line.get_ydata()
        width = float(np.ptp(bars[0].get_segments()[0][:, 0])) / 2 if bars else 0.0
        points[(container in variance.containers, round(float(x), 6), round(float(y), 6))] = (line.get_color(), width)
    assert points == {
        (False, -1.5, -0.25): ("#2e7d32", 3.0),
        (False, -5.0, 0.25): ("#c62828", 1.0),
        (False, 13.8, 1.0): ("#1565c0", 0.0),  # one seed: no spread drawn
        (True, -140.0, 0.0): ("#c62828", 90.0),
    }
    counts = [t.get_text() for t in accuracy.texts]
    assert counts == ["1 ✓  0 ↑  1 ↓", "0 ✓  1 ↑  0 ↓"]
    assert "pp²" in variance.get_xlabel() and "pp;" in accuracy.get_xlabel()


def test_the_summary_picture_of_a_run_with_nothing_compared_says_so(monkeypatch, tmp_path):
    """The quick configurations compare nothing (every cell not comparable): the picture is drawn all the same, with
    a sentence in place of the rows, so the summary rule never fails on it."""
    from fed.reporting import figures
    from fed.reporting.summary import compared_cells

    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda fig, out: drawn.setdefault("fig", fig))
    quick = pd.DataFrame({"verdict": ["not comparable (10 of 50 rounds)"], "delta": [1.0]})
    figures.plot_verdict_deltas(compared_cells([("fedzda", "fedzda/table1", quick)]), tmp_path / "s.png", "t")
    (ax,) = drawn["fig"].axes
    assert [t.get_text() for t in ax.texts] == ["no cell compared with a paper's number"] and not ax.containers


def test_a_configuration_without_a_table_in_the_paper_s_layout_says_it_compares_nothing():
    """The head-to-head's tables are leaderboards: its summary says nothing is compared with a paper, in place of
    empty tables, on all three pages."""
    from fed.reporting.summary import NOTHING_COMPARED, summary_html

    counts = verdict_counts([])
    assert counts.empty
    assert NOTHING_COMPARED in summary_markdown(counts, {}) and "| paper" not in summary_markdown(counts, {})
    assert NOTHING_COMPARED in summary_html(counts, {}) and "<table" not in summary_html(counts, {})
    rst = summary_rst(counts, {}).removeprefix("{% raw %}").rstrip().removesuffix("{% endraw %}")
    rst += "\n\n.. _summary.png: javascript:app.showResultInfo('x')\n"
    html = publish_parts(rst, writer="html", settings_overrides={"report_level": 2, "halt_level": 2})["html_body"]
    assert "compares with a paper" in html and "<table" not in html
