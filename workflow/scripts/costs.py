"""Measured cost of every method of a paper's tables (run wall time, seconds per round, generation time) and
the privacy ledger of its runs (what left the clients, and the guarantees)."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from fed.reporting.tables import LEDGER_NOTES, cost_table, privacy_table, write_frame

cells = [dict(c, path=path) for c, path in zip(snakemake.params.cells, snakemake.input)]
caption = (
    f"Measured cost of the {snakemake.wildcards.paper} table runs under preset '{snakemake.wildcards.preset}' "
    "(mean over seeds; wall time includes evaluation; jobs ran side by side, so times include contention)."
)
write_frame(cost_table(cells), snakemake.output.csv.removesuffix(".csv"), caption)
ledger = privacy_table(cells)
notes = "; ".join(f"{k}: {v}" for k, v in LEDGER_NOTES.items() if k in ledger.columns)
write_frame(
    ledger,
    snakemake.output.privacy_csv.removesuffix(".csv"),
    f"Privacy ledger of the {snakemake.wildcards.paper} table runs under preset '{snakemake.wildcards.preset}': what "
    "left the clients (counts per run) and the guarantees stated for it (largest over seeds)"
    + (f". {notes}." if notes else "."),
)
