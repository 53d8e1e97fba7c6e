"""The report's opening page counts every cell's verdict and lists every claim."""

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
    html = publish_parts(body, writer_name="html", settings_overrides={"report_level": 2, "halt_level": 2})["html_body"]
    assert "Table cells per verdict" in html and "c1" in html and "contradicted" in html


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
