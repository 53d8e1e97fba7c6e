"""The report's opening page: verdict counts per paper and table, and every paper's claims; its picture, every
compared cell as ours − paper (fed.reporting.summary, fed.reporting.figures)."""

import sys
from pathlib import Path

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

import pandas as pd

from fed.reporting.figures import plot_verdict_deltas
from fed.reporting.summary import compared_cells, summary_html, summary_markdown, summary_rst, verdict_counts

p = snakemake.params
tables = [(p.papers[t], t, pd.read_csv(f)) for t, f in zip(p.tables, snakemake.input.tables)]
counts = verdict_counts(tables)
claims = {paper: pd.read_csv(f) for paper, f in zip(p.claim_papers, snakemake.input.claims)}
Path(snakemake.output.rst).write_text(summary_rst(counts, claims))
Path(snakemake.output.md).write_text(summary_markdown(counts, claims))
Path(snakemake.output.html).write_text(summary_html(counts, claims))
cells = compared_cells(tables, p.labels)
cells.to_csv(snakemake.output.cells, index=False)
plot_verdict_deltas(cells, snakemake.output.figure, "Every table cell compared with a paper: ours − paper, by verdict")
