"""What one job cost — wall seconds, peak resident memory, CPU seconds — in the file format of Snakemake's
``benchmark:`` directive (a TSV with ``s``, ``max_rss`` in MB and ``cpu_time``), so that the cost tables read a job
the same whether Snakemake or ``fed campaign`` ran it. Snakemake samples its job's process tree; a campaign's job runs
in a pool worker that outlives it, so ``JobMeter`` resets the worker's peak (Linux: ``/proc/self/clear_refs``) and
reads it back at the end (``VmHWM``). Where the peak cannot be reset it is the worker's lifetime peak, an upper
bound, and the file says so in ``max_rss_since``."""

from __future__ import annotations

import csv
import resource
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

COLUMNS = ("s", "h:m:s", "max_rss", "max_vms", "max_uss", "max_pss", "io_in", "io_out", "mean_load", "cpu_time")


def read(path: str | Path) -> dict[str, float] | None:
    """Wall seconds, peak resident memory (MB) and CPU seconds of one job's benchmark file; None where there is none."""
    path = Path(path)
    if not path.exists():
        return None
    with path.open() as f:
        row = next(csv.DictReader(f, delimiter="\t"))
    return {"seconds": float(row["s"]), "max_rss_mb": float(row["max_rss"]), "cpu_seconds": float(row["cpu_time"])}


def write(path: str | Path, seconds: float, max_rss_mb: float, cpu_seconds: float, **extra: Any) -> None:
    """A benchmark file of Snakemake's columns (those not measured: NA), written whole or not at all."""
    values = {"s": f"{seconds:.4f}", "h:m:s": str(timedelta(seconds=round(seconds))), "max_rss": f"{max_rss_mb:.2f}"}
    values["cpu_time"] = f"{cpu_seconds:.2f}"
    header, row = [*COLUMNS, *extra], [values.get(c, "NA") for c in COLUMNS] + [str(v) for v in extra.values()]
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    tmp.write_text("\t".join(header) + "\n" + "\t".join(row) + "\n")
    tmp.replace(path)


def _peak_mb() -> float:
    """This process's peak resident memory in MB (``VmHWM``; elsewhere than Linux ``ru_maxrss``, in kB there)."""
    try:
        status = Path("/proc/self/status").read_text()
        return float(status.split("VmHWM:")[1].split()[0]) / 1024
    except (OSError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class JobMeter:
    """Measures the job run inside ``with JobMeter() as meter:``; ``meter.write(path)`` afterwards."""

    def __enter__(self) -> JobMeter:
        try:  # "5": reset the peak resident set size to the current one (proc(5), clear_refs)
            Path("/proc/self/clear_refs").write_text("5")
            self.since = "job"
        except OSError:
            self.since = "process"
        self.start, self.cpu = time.perf_counter(), _cpu_seconds()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.start
        self.cpu_seconds = _cpu_seconds() - self.cpu
        self.max_rss_mb = _peak_mb()

    def write(self, path: str | Path) -> None:
        write(path, self.seconds, self.max_rss_mb, self.cpu_seconds, max_rss_since=self.since)
