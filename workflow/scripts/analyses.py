"""A leaderboard's analyses named in advance (fed.reporting.analyses; docs/headtohead-protocol.md, section 5): every
analysis of every metric as CSV, and per metric a glance table (md, html)."""

import sys
from html import escape

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from fed.reporting import analyses
from fed.reporting.leaderboard import DEFAULT_BASELINE
from fed.reporting.tables import HTML_HEAD, collect_runs

table = snakemake.params.table
runs = collect_runs([dict(c, path=path) for c, path in zip(snakemake.params.cells, snakemake.input)])
every, glances = analyses.board_analyses(runs, table, snakemake.params.report)
md = [analyses.CAPTION.format(title=table["title"], baseline=table.get("baseline", DEFAULT_BASELINE))]
body = ""
for title, frame in glances:
    md += [f"**{title}**", frame.to_markdown(index=False, disable_numparse=True)]
    body += f"<h3>{escape(title)}</h3>" + frame.to_html(index=False, border=0, classes="fedrepro-table")
out = snakemake.output.csv.removesuffix(".csv")
every.to_csv(f"{out}.csv", index=False)
with open(f"{out}.md", "w") as f:
    f.write("\n\n".join(md) + "\n")
with open(f"{out}.html", "w") as f:
    f.write(f"{HTML_HEAD}<p>{escape(md[0])}</p>{body}\n")
