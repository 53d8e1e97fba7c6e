"""A leaderboard's analyses named in advance (fed.reporting.analyses; docs/headtohead-protocol.md, section 5): every
analysis of every metric as CSV, and per metric a glance table (md, html)."""

import sys
from html import escape

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

import pandas as pd

from fed.reporting import analyses
from fed.reporting.leaderboard import DEFAULT_BASELINE, higher_is_better
from fed.reporting.tables import HTML_HEAD, collect_runs

table, report = snakemake.params.table, snakemake.params.report
runs = collect_runs([dict(c, path=path) for c, path in zip(snakemake.params.cells, snakemake.input)])
baseline = table.get("baseline", DEFAULT_BASELINE)
every, md, body = [], [analyses.CAPTION.format(title=table["title"], baseline=baseline)], ""
for metric in table["metrics"]:
    analysed = analyses.analyse(analyses.board_values(runs, metric, report), baseline, higher_is_better(metric))
    every.append(analysed.assign(metric=metric))
    frame = analyses.glance(analysed, [m for m in table["methods"] if m != baseline])
    md += [f"**{metric}**", frame.to_markdown(index=False, disable_numparse=True)]
    body += f"<h3>{metric}</h3>" + frame.to_html(index=False, border=0, classes="fedrepro-table")
out = snakemake.output.csv.removesuffix(".csv")
pd.concat(every, ignore_index=True).to_csv(f"{out}.csv", index=False)
with open(f"{out}.md", "w") as f:
    f.write("\n\n".join(md) + "\n")
with open(f"{out}.html", "w") as f:
    f.write(f"{HTML_HEAD}<p>{escape(md[0])}</p>{body}\n")
