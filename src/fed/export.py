"""Committing finished cells: ``fed export-reference`` and ``fed campaign --export`` copy a cell's record (never its
weights) from a workflow's ``results_dir`` to a ``reference_dir`` (``fed.reference``), from which its tables rebuild
without training, so that nothing computed is lost with a machine that does not keep its files."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

EXTRAS = ("audit.json", "benchmark.tsv")  # an audited table's leakage and bytes; the job's peak memory


def export_reference(results: Path, reference: Path, cells: list[str] | None = None) -> list[str]:
    """Copy every finished cell (``metrics.json`` written last, atomically) with its ``history.csv`` (and its
    ``EXTRAS`` where there are) from ``results/runs`` to ``reference/runs``, and list them in
    ``reference/MANIFEST.json`` with the commit of the code that ran them (as the cell recorded it; else the results
    folder's checkout now). ``cells``: only these (paths relative to ``runs/``, e.g. ``dafl/fmnist/1-label/fedavg/
    seed0``); a named cell that has not finished is an error, before anything is copied. Returns the cells copied.
    Each cell's ``metrics.json`` lands last and whole, and the manifest is rewritten under a lock, so campaigns
    exporting at once never leave a half-written cell or lose another's entry."""
    from fed.tracking import git_commit

    runs = results / "runs"
    if cells is None:
        finished = sorted(str(m.parent.relative_to(runs)) for m in runs.glob("**/metrics.json"))
    elif missing := sorted(c for c in set(cells) if not (runs / c / "metrics.json").exists()):
        raise ValueError(f"not finished under {runs} (no metrics.json): {missing}")
    else:
        finished = sorted(set(cells))  # named: no walk of the whole tree for each cell a campaign exports
    commits = {}
    for cell in finished:
        source, target = runs / cell, reference / "runs" / cell
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / "history.csv", target / "history.csv")
        for extra in EXTRAS:
            if (source / extra).exists():
                shutil.copyfile(source / extra, target / extra)
        record = _with_partition(json.loads((source / "metrics.json").read_text()), results)
        _write_atomic(target / "metrics.json", json.dumps(record, indent=1))
        commits[cell] = record.get("tracking", {}).get("tags", {}).get("git_commit") or git_commit(results)
    _add_to_manifest(reference, commits)
    return finished


def _with_partition(record: dict, results: Path) -> dict:
    """A record of a cell run before metrics.json recorded its partition's spec, with the spec read from its file."""
    from fed.runner import partition_spec

    part = results.parent / record["partition_file"]
    if "partition" not in record and part.exists():
        record["partition"] = partition_spec(part)
    return record


def _add_to_manifest(reference: Path, commits: dict[str, str]) -> None:
    """``MANIFEST.json``'s cells updated with ``commits``, under a lock on the reference folder."""
    reference.mkdir(parents=True, exist_ok=True)
    folder = os.open(reference, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)  # held until closed
        manifest = reference / "MANIFEST.json"
        old = json.loads(manifest.read_text()) if manifest.exists() else {"cells": {}}
        old["cells"].update(commits)
        _write_atomic(manifest, json.dumps(old, indent=1, sort_keys=True))
    finally:
        os.close(folder)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
