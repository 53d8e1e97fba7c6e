"""Aggregate a table's cells into a reproduction table in the paper's layout, or a leaderboard (csv, md, html)."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from fed.reporting import leaderboard as lb
from fed.reporting.tables import build_table, collect_runs, machine_note, mixes_machines, paper_values, write_table
from fed.reporting.verdicts import Tolerance

exp, preset = snakemake.params.table, snakemake.params.preset
tolerance = Tolerance(**snakemake.params.verdict)
cells = [dict(c, path=path) for c, path in zip(snakemake.params.cells, snakemake.input)]
last_rounds = exp.get("last_rounds", 0)  # a seed study's columns: each seed and its last rounds
runs = collect_runs(cells, last_rounds)
if mixes_machines(runs):  # float32 rounding differs between them: no verdict on a gap that rounding can make
    tolerance = tolerance.across_machines()
out = snakemake.output.csv.removesuffix(".csv")
clients = preset.get("num_clients") or f"|D_k| ≈ {preset['avg_client_size']}"
if isinstance(clients, dict):  # per dataset
    clients = ", ".join(f"{n} ({d})" for d, n in clients.items() if d in exp["datasets"])
setting = (
    f"preset '{exp['preset']}' ({clients} clients, {preset['rounds']} rounds, E={preset['local_epochs']}, "
    f"B={preset['batch_size']}, {preset.get('optimizer', 'sgd')} lr={preset['lr']})"
)
extras = [preset["note"].rstrip(".")] if preset.get("note") else []
if where := machine_note(runs):
    extras.append(where.rstrip("."))
protocols = snakemake.params.protocols  # methods' departures from the preset
if own := "; ".join(f"{m}: " + ", ".join(f"{k} {v}" for k, v in p.items()) for m, p in protocols.items()):
    extras.append(f"Methods with their own local settings (`protocol:`): {own}")
note = "".join(f". {x}" for x in extras)  # sentences after the setting

if exp["layout"] == "leaderboard":  # every method against a baseline, per regime (fed.reporting.leaderboard)
    board = lb.leaderboard(
        runs,
        exp["datasets"],
        exp["partitions"],
        exp["methods"],
        exp["metrics"],
        preset["report"],
        exp.get("baseline", lb.DEFAULT_BASELINE),
        snakemake.params.sweeps,
        exp["select_by"],
    )
    reduction = f". {preset['reduction']}" if preset.get("reduction") else ""
    caption = lb.caption(exp["title"], setting + reduction + note, board, len(exp["seeds"]), preset["report"])
    lb.write_leaderboard(board, out, caption)
else:  # the paper's layout, a verdict per cell
    table = build_table(
        runs,
        paper_values(exp["paper"]),
        exp["table"],
        exp["datasets"],
        exp["partitions"],
        {m: exp.get("paper_method", {}).get(m, m) for m in exp["methods"]},
        exp["metrics"],
        preset["report"],
        set(snakemake.params.implemented),
        snakemake.params.sweeps,
        exp["select_by"],
        not_comparable=preset.get("reduction", ""),
        tolerance=tolerance,
        paper_dataset=exp.get("paper_dataset"),
        paper_partition=exp.get("paper_partition"),
        paper_where=exp.get("paper_where"),
        last_rounds=last_rounds,
    )
    caption = (
        f"{exp['title']}. Ours: mean ± sample std over {len(exp['seeds'])} seeds "
        f"({preset['report']}-round protocol), {setting}. "
        f"Paper: {exp['paper']} {exp['table']}. "
        f"{(preset.get('reduction') or 'Full paper setting').rstrip('.')}"
        + note
        + "."
        + (
            f" Swept methods ({', '.join(snakemake.params.sweeps)}) show the variant with the best mean"
            f" {exp['select_by']} at the last round, chosen per dataset and partition (column 'variant')."
            if snakemake.params.sweeps
            else ""
        )
    )
    write_table(table, out, caption, tolerance, last_rounds)
