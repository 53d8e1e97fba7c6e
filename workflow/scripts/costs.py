"""Measured cost of every method of a paper's tables (run wall time, seconds per round, generation time) and
the privacy ledger of its runs (what left the clients, and the guarantees); for audited tables also bytes, peak
memory and the leakage of what was shared (fed.reporting.audit)."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from fed.reporting.audit import AUDIT_DECIMALS, KEYS, audit_costs, audit_privacy
from fed.reporting.tables import (
    COST_DECIMALS,
    LEDGER_NOTES,
    cost_table,
    ledger_decimals,
    privacy_table,
    write_frame,
)

cells = [dict(c, path=path) for c, path in zip(snakemake.params.cells, snakemake.input.metrics)]
metrics = {tuple(c[k] for k in (*KEYS, "seed")): c["path"] for c in cells}
audited = [
    dict(c, path=path, metrics=metrics[tuple(c[k] for k in (*KEYS, "seed"))])
    for c, path in zip(snakemake.params.audited, snakemake.input.audits)
]
w = snakemake.wildcards
# the CSVs unrounded (the answer table averages them over regimes), each md column at its own table's decimals
costs, ledger = cost_table(cells, snakemake.params.baseline, None), privacy_table(cells, None)
shown = {"costs": dict.fromkeys(costs.columns, COST_DECIMALS), "ledger": ledger_decimals(ledger.columns)}
audit_note = ""
if audited:
    extra_costs, extra_ledger = audit_costs(audited, None), audit_privacy(audited, None)
    costs = costs.merge(extra_costs, on=KEYS, how="left")
    ledger = ledger.merge(extra_ledger, on=KEYS, how="left")
    shown["costs"] |= {c: AUDIT_DECIMALS for c in extra_costs.columns if c not in KEYS}
    shown["ledger"] |= {c: AUDIT_DECIMALS for c in extra_ledger.columns if c not in KEYS}
    audit_note = (
        " Audited (fed.leakage): mb_shared is what left the clients beyond model updates over the run (float32 items"
        " of the ledger, labels aside); records is the record-like artifact tested: is its closest real record one of"
        " its client's training records or one of that client's held-out records? leakage scales that rate"
        " (closer_to_train) to chance (chance: the training records' share): 0 no more often than chance, 1 raw"
        " records; dcr_* are the median distances. inversion_leakage is the same test for ZSDG's inversion of the"
        " final model, against all training records and the test set: what model updates give away. Mean (and std)"
        " over seeds."
    )
caption = (
    f"Measured cost of the {w.paper} table runs under preset '{w.preset}' (mean over seeds; wall time includes"
    " evaluation; jobs ran side by side, so times include contention)"
    + (
        "; MB a participating client exchanges per round (model down and up), MB each client shares beyond it,"
        " the train job's peak resident memory and its preparatory stages' wall time and peak memory."
        if audited
        else "."
    )
)
write_frame(costs.round(shown["costs"]), snakemake.output.csv.removesuffix(".csv"), caption, csv_frame=costs)
notes = "; ".join(f"{k}: {v}" for k, v in LEDGER_NOTES.items() if k in ledger.columns)
write_frame(
    ledger.round(shown["ledger"]),
    snakemake.output.privacy_csv.removesuffix(".csv"),
    f"Privacy ledger of the {w.paper} table runs under preset '{w.preset}': what left the clients (counts per run)"
    " and the guarantees stated for it (largest over seeds)" + (f". {notes}." if notes else ".") + audit_note,
    csv_frame=ledger,
)
