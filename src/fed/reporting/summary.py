"""The report's opening page: per paper, how many table cells are reproduced, above or below the paper, or not
comparable, and the paper's claims with their verdicts — what a reader should see before any table."""

from __future__ import annotations

import csv
import io

import pandas as pd

from fed.reporting.tables import HTML_HEAD
from fed.reporting.verdicts import (
    ABOVE,
    BELOW,
    DIVERGED,
    NO_PAPER,
    NO_RUNS,
    NOT_COMPARABLE,
    NOT_IMPLEMENTED,
    REPRODUCED,
)

VERDICTS = (REPRODUCED, ABOVE, BELOW, NOT_COMPARABLE, NO_PAPER, DIVERGED, NOT_IMPLEMENTED, NO_RUNS)
ALWAYS_SHOWN = VERDICTS[:5]  # the question the tool answers: compared (three ways), not comparable, nothing to compare
CLAIM_COLUMNS = ["claim", "statement", "verdict", "evidence", "setting"]


def verdict_of(label: str) -> str:
    """The verdict a table cell's label starts with ("not comparable (12 of 100 rounds)" → "not comparable")."""
    return next((v for v in VERDICTS if str(label).startswith(v)), str(label))


def verdict_counts(tables: list[tuple[str, str, pd.DataFrame]]) -> pd.DataFrame:
    """One row per (paper, table) of ``(paper, table name, table CSV)``: its cells per verdict. Reproduced, above,
    below, not comparable and no paper value are always columns; the others only where some cell has them."""
    rows = []
    for paper, name, df in tables:
        counts = df.verdict.map(verdict_of).value_counts()
        rows.append({"paper": paper, "table": name, "cells": len(df), **{v: int(counts.get(v, 0)) for v in VERDICTS}})
    out = pd.DataFrame(rows, columns=["paper", "table", "cells", *VERDICTS])
    return out[[c for c in out.columns if c not in VERDICTS or c in ALWAYS_SHOWN or out[c].sum() > 0]]


COMPARED = (REPRODUCED, ABOVE, BELOW)
CELL_COLUMNS = ["paper", "table", "label", "dataset", "partition", "method", "metric", "paper_value", "ours_mean"]
CELL_COLUMNS += ["ours_std", "seeds", "delta", "verdict"]


def compared_cells(tables: list[tuple[str, str, pd.DataFrame]], labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Every cell of ``tables`` (as ``verdict_counts`` takes them) that was compared with a paper's number —
    reproduced, above or below it — with ours − paper (``delta``) and its verdict without the detail; ``labels``
    names a table as a reader knows it (the paper's "Table 3"), else its output name. Not comparable cells, cells
    without a paper value and cells without runs are what ``verdict_counts`` counts, and are not drawn."""
    frames = []
    for paper, name, df in tables:
        cells = df.assign(paper=paper, table=name, label=(labels or {}).get(name, name))
        cells = cells.assign(verdict=cells.verdict.map(verdict_of))
        frames.append(cells[cells.verdict.isin(COMPARED)].reindex(columns=CELL_COLUMNS))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=CELL_COLUMNS)


def paper_counts(counts: pd.DataFrame) -> pd.DataFrame:
    """``verdict_counts`` summed per paper: one row per paper, the same columns less ``table``."""
    return counts.drop(columns="table").groupby("paper", sort=False, as_index=False).sum()


NOTHING_COMPARED = "No table of this configuration compares with a paper's numbers (a leaderboard compares methods)."


def summary_markdown(counts: pd.DataFrame, claims: dict[str, pd.DataFrame]) -> str:
    parts = ["# Reproduction summary", ""]
    if counts.empty:
        parts += [NOTHING_COMPARED, ""]
    else:
        parts += ["Table cells per verdict, per paper:", "", paper_counts(counts).to_markdown(index=False), ""]
        parts += ["Per table:", "", counts.to_markdown(index=False), ""]
    for paper, df in claims.items():
        parts += [f"## Claims of {paper}", "", df[CLAIM_COLUMNS].to_markdown(index=False), ""]
    return "\n".join(parts)


def summary_html(counts: pd.DataFrame, claims: dict[str, pd.DataFrame]) -> str:
    parts = [HTML_HEAD, "<h2>Reproduction summary</h2>"]
    if counts.empty:
        parts.append(f"<p>{NOTHING_COMPARED}</p>")
    else:
        parts += ["<p>Table cells per verdict, per paper</p>", _html(paper_counts(counts))]
        parts += ["<p>Per table</p>", _html(counts)]
    for paper, df in claims.items():
        parts += [f"<p>Claims of {paper}</p>", _html(df[CLAIM_COLUMNS])]
    return "\n".join(parts) + "\n"


def _html(df: pd.DataFrame) -> str:
    return df.to_html(index=False, na_rep="", border=0, classes="fedrepro-table")


def summary_rst(counts: pd.DataFrame, claims: dict[str, pd.DataFrame]) -> str:
    """reStructuredText for Snakemake's report landing page, which shares the screen with the rule graph: the cell
    counts and each claim's verdict (statements and evidence: ``summary.html`` under Summary), and a link to the
    summary's picture (``summary.png_``: Snakemake adds a link target per result, by file name). Wrapped in a Jinja
    raw block: Snakemake renders it as a template."""
    parts = [
        "{% raw %}",
        "Reproduction summary",
        "====================",
        "",
        "*Reproduced*: within the stated tolerance of the paper; *not comparable*: our preset departs from the"
        " paper's protocol. Tables: every cell; Summary: the counts per table and the claims with their statements and"
        " evidence. Every compared cell drawn as ours − paper, coloured by its verdict: summary.png_.",
        "",
        NOTHING_COMPARED if counts.empty else _csv_table("Table cells per verdict, per paper", paper_counts(counts)),
    ]
    verdicts = [df.assign(paper=paper)[["paper", "claim", "verdict"]] for paper, df in claims.items()]
    if verdicts:
        parts.append(_csv_table("Claims", pd.concat(verdicts)))
    parts.append("{% endraw %}")
    return "\n".join(parts) + "\n"


def _csv_table(title: str, df: pd.DataFrame) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(df.columns)
    writer.writerows(df.astype(str).values.tolist())
    body = "\n".join("   " + line for line in buf.getvalue().splitlines())
    return f".. csv-table:: {title}\n   :header-rows: 1\n\n{body}\n"
