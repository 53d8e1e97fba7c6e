"""The report's opening page counts every cell's verdict and lists every claim."""

import pandas as pd
from docutils.core import publish_parts

from fed.reporting.summary import summary_rst, verdict_counts


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
