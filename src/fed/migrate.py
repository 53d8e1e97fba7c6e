"""``fed migrate-params``: record the params of the jobs whose params changed only in key order, so they do not rerun.

The rules that prepare data, partition, stage and train pass config entries with their keys sorted
(:func:`fed.config.canonical`, since 2026-12-05), and Snakemake compares a job's params by their repr, key order
included. In a tree built before, those jobs read "Params have changed since last execution" although no value did.
This reads a dry run's reasons (Snakemake's params before and now of each job planned for a params change), rewrites
the records of the jobs whose params now are those before with their keys sorted, and lets
Snakemake judge: a rewritten record is kept only where a second dry run no longer plans its job for a params change;
every other record is put back byte for byte. The records as they were are kept under
``.snakemake/fed-migrate/<UTC time>/`` (same layout as ``.snakemake/metadata``).

It reads and writes Snakemake's file persistence (``.snakemake/metadata``, the record layout of Snakemake 9's
``FilePersistence``). A tree kept in the database backend is not read: the dry runs use the file backend, find no
records and so no params change, and nothing is rewritten. An output listed with no record file is reported as
unrecorded and left alone.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
from base64 import urlsafe_b64encode
from pathlib import Path

from fed.config import canonical

REASON = "Params have changed since last execution: Union of exclusive params before and now across all output: "
NOTHING = "<nothing exclusive>"


def params_change(reason: str) -> tuple[list[str], list[str]] | None:
    """The params only in the record (before) and only in the rule now, as reprs, from a dry run's reason line
    (Snakemake 9's ``ParamsChange``: each side its reprs joined by commas, or "<nothing exclusive>"); None when
    the reason has no params change or does not parse."""
    _, found, rest = reason.partition(REASON + "before: ")
    if not found:
        return None
    rest = rest.split("; Software environment definition has changed", 1)[0].rstrip()
    for at in (m.start() for m in re.finditer(" now: ", rest)):  # a repr may contain " now: ": try each split
        try:
            return _reprs(rest[:at]), _reprs(rest[at + len(" now: ") :])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def _reprs(joined: str) -> list[str]:
    if joined.strip() == NOTHING:
        return []
    return [repr(value) for value in ast.literal_eval(f"[{joined}]")]  # a builtin's repr round-trips exactly


def only_key_order(before: list[str], now: list[str]) -> bool:
    """Whether the params ``now`` are those ``before`` with every dict's keys sorted: equal as values, and each one
    now in sorted form. A rule that passes a mapping in its config order (a table's, a figure's) may make that order
    its output's, so such a change is left to rerun."""
    return bool(before or now) and _canonical(before) == _canonical(now) == sorted(now)


def _canonical(reprs: list[str]) -> list[str]:
    return sorted(repr(canonical(ast.literal_eval(text))) for text in reprs)


def record_path(metadata: Path, key: str) -> Path:
    """Where Snakemake's file persistence keeps the record of output ``key``: its URL-safe base64, split into
    folders of at most NAME_MAX − 1 characters, each but the last prefixed with '@'."""
    name_max = os.pathconf(metadata, "PC_NAME_MAX") if os.name == "posix" else 255
    step = (name_max or 255) - 1
    b64 = urlsafe_b64encode(key.encode()).decode()
    parts = [b64[i : i + step] for i in range(0, len(b64), step)]
    return metadata.joinpath(*["@" + p for p in parts[:-1]], parts[-1])


def params_changes(
    snakefile: Path, workdir: Path, configfiles: list[str]
) -> dict[str, tuple[list[str], list[str]] | None]:
    """Each job a dry run plans because its params changed: its outputs (joined by ', ') → (before, now) reprs.
    A job whose reason does not parse maps to None."""
    argv = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "-d", str(workdir), "-n"]
    if configfiles:
        argv += ["--configfile", *configfiles]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=workdir)
    if proc.returncode != 0:
        raise ValueError(f"snakemake -n failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    changes, output = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith("    output: "):
            output = line[len("    output: ") :]
        elif line.startswith("    reason: ") and output and "Params have changed" in line:
            changes[output] = params_change(line[len("    reason: ") :])
        elif not line.startswith("    "):
            output = None
    return changes


def migrate(snakefile: Path, workdir: Path, configfiles: list[str], apply: bool = False) -> dict[str, list[str]]:
    """Rewrite the records of the jobs whose params changed only in key order (kept only with ``apply``). Returns
    jobs, each named by its first output: ``migrated`` (changed only in order: rewritten, or would be),
    ``changed`` (a value changed, or the reason did not parse: they rerun) and ``unrecorded`` (an output with no
    record file here)."""
    dot = workdir / ".snakemake"
    if any((dot / "locks").glob("*")):
        raise ValueError(
            f"a Snakemake run holds {workdir} ({dot / 'locks'} is not empty): let it finish, or if none runs, "
            "`snakemake --unlock` with the same arguments"
        )
    metadata, backup = dot / "metadata", dot / "fed-migrate" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    outcome: dict[str, list[str]] = {"migrated": [], "changed": [], "unrecorded": []}
    rewritten: dict[str, list[tuple[Path, str]]] = {}  # job → its record files and their texts as they were
    for outputs, change in params_changes(snakefile, workdir, configfiles).items():
        job, files = outputs.split(", ")[0], [record_path(metadata, key) for key in outputs.split(", ")]
        if change is None or not only_key_order(*change):
            outcome["changed"].append(job)
        elif not all(path.is_file() for path in files):
            outcome["unrecorded"].append(job)
        else:
            before, now = change
            rewritten[job] = [(path, path.read_text()) for path in files]
            for path, text in rewritten[job]:
                saved = backup / path.relative_to(metadata)
                saved.parent.mkdir(parents=True, exist_ok=True)
                saved.write_text(text)  # before the record is touched, so an interruption loses nothing
                record = json.loads(text)
                params = sorted((set(record.get("params") or []) - set(before)) | set(now))
                _write_atomic(path, json.dumps(record | {"params": params}))
    still: set[str] = set(rewritten)
    try:
        if rewritten:  # Snakemake judges: a job still planned for its params keeps its records as they were
            still = {outputs.split(", ")[0] for outputs in params_changes(snakefile, workdir, configfiles)}
    finally:
        for job, records in rewritten.items():
            for path, text in records if job in still or not apply else ():
                _write_atomic(path, text)
    for job in rewritten:
        outcome["changed" if job in still else "migrated"].append(job)
    if not apply or not rewritten:
        shutil.rmtree(backup, ignore_errors=True)
        if backup.parent.is_dir() and not any(backup.parent.iterdir()):
            backup.parent.rmdir()
    return outcome


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(".fed-migrate.tmp")  # a short name: a record's own can be NAME_MAX long
    tmp.write_text(text)
    shutil.copymode(path, tmp)
    os.replace(tmp, path)
