"""An audited leaderboard's answer table: where each method wins, at what privacy and compute price."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

import pandas as pd

from fed.reporting.answer import answer_table
from fed.reporting.tables import write_frame

table, inp = snakemake.params.table, snakemake.input
metric = table["metrics"][0]
baseline = table.get("baseline", "fedavg")
frame = answer_table(pd.read_csv(inp.leaderboard), pd.read_csv(inp.costs), pd.read_csv(inp.privacy), metric)
reduction = f" Preset '{table['preset']}': {snakemake.params.reduction}." if snakemake.params.reduction else ""
write_frame(
    frame,
    snakemake.output.csv.removesuffix(".csv"),
    f"{table['title']} — the answer: per method (by mean rank over all regimes), its mean paired difference in"
    f" {metric} to {baseline} over every (regime, seed) pair (* significant after Holm), the regimes where it is"
    f" significantly better or worse (paired t over seeds, Holm), and, averaged over the regimes, what it shares, the"
    " leakage score of that and of its model's inversion (0: chance, 1: raw records), its stated ε, the MB it shares,"
    f" its wall time relative to {baseline}, the MB a client exchanges per round, its stages' seconds and its peak"
    f" memory (from the leaderboard, cost and privacy tables).{reduction}",
)
