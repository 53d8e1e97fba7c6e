"""How long a whole Snakemake grid takes on C cores, from a measured run of part of it (e.g. one seed of three).

    snakemake --cores 2 --configfile config/fmnist.yaml --configfile one_seed.yaml ...   # measured, log kept
    snakemake -n --cores 2 --configfile config/fmnist.yaml --config reference_dir=null > dag.txt  # the whole grid
    python benchmarks/grid_time.py --measured .snakemake/log/<run>.snakemake.log --dag dag.txt --cores 2

Each job's duration is read from the measured log (its start line to its "Finished jobid" line). A job of the whole
grid that the measured run did not run takes the duration of the measured job whose outputs are its own with the seed
replaced (``seed2`` -> ``seed0``): another seed of the same cell costs what the measured seed cost. The dependencies
come from the dry run's inputs and outputs. The replay starts ready jobs, longest first, whenever enough cores are
free, as Snakemake does with ``--cores C``.

Prints the measured run's wall time beside the replay of the measured run itself (how far the replay is from the
clock), then the replay of the whole grid. Last line: ``grid_hours=<h> cpu_hours=<h>``.
"""

from __future__ import annotations

import argparse
import heapq
import re
from dataclasses import dataclass, field
from datetime import datetime

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?rule (\w+):$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")
SEED = re.compile(r"seed\d+")


@dataclass
class Job:
    rule: str
    jobid: int
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    threads: int = 1
    start: datetime | None = None
    end: datetime | None = None

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds() if self.start and self.end else 0.0

    @property
    def key(self) -> tuple[str, ...]:
        """The job's outputs with the seed taken out: the same key for every seed of one cell."""
        return (self.rule, *sorted(SEED.sub("seed*", o) for o in self.outputs))


def parse_log(text: str) -> list[Job]:
    """The jobs of a Snakemake (8-9) log or dry run, with their files and, where it ran, start and end."""
    jobs: dict[int, Job] = {}
    stamp: datetime | None = None
    current: Job | None = None
    for line in text.splitlines():
        if m := STAMP.match(line.strip()):
            stamp, current = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y"), None
        elif m := RULE.match(line.strip()):
            current = Job(m.group(1), -1, start=stamp)
        elif m := FINISHED.match(line.strip()):
            if int(m.group(1)) in jobs:
                jobs[int(m.group(1))].end = stamp
        elif current is not None and ":" in line and line.startswith("    "):
            name, _, value = line.strip().partition(": ")
            if name == "jobid":
                current.jobid = int(value)
                jobs[current.jobid] = current
            elif name in ("input", "output"):
                files = [v.strip() for v in value.split(",") if v.strip()]
                (current.inputs if name == "input" else current.outputs).extend(files)
            elif name == "threads":
                current.threads = int(value)
    return list(jobs.values())


def replay(jobs: list[Job], seconds: dict[int, float], cores: int) -> float:
    """Makespan of ``jobs`` on ``cores`` when each starts once its inputs' producers have finished, longest ready
    job first."""
    producer = {o: j.jobid for j in jobs for o in j.outputs}
    needs = {j.jobid: {producer[i] for i in j.inputs if i in producer} for j in jobs}
    by_id = {j.jobid: j for j in jobs}
    done: set[int] = set()
    running: list[tuple[float, int]] = []  # (end time, jobid)
    now, free = 0.0, cores
    waiting = set(by_id)
    while waiting or running:
        ready = sorted((j for j in waiting if needs[j] <= done), key=lambda j: -seconds[j])
        for j in ready:
            threads = min(by_id[j].threads, cores)
            if threads <= free:
                free -= threads
                waiting.discard(j)
                heapq.heappush(running, (now + seconds[j], j))
        if not running:
            raise ValueError(f"jobs {sorted(waiting)} wait on each other (a cycle)")
        now, j = heapq.heappop(running)
        free += min(by_id[j].threads, cores)
        done.add(j)
    return now


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measured", required=True, help="log of the measured Snakemake run")
    ap.add_argument("--dag", required=True, help="dry-run output (snakemake -n) of the whole grid")
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args()
    measured = parse_log(open(args.measured).read())
    ran = [j for j in measured if j.start and j.end]
    wall = (max(j.end for j in ran) - min(j.start for j in ran)).total_seconds()
    by_key = {j.key: j.seconds for j in ran}
    own = replay(ran, {j.jobid: j.seconds for j in ran}, args.cores)
    print(f"measured: {len(ran)} jobs, wall {wall / 3600:.2f} h, cpu {sum(j.seconds for j in ran) / 3600:.2f} h")
    print(f"replay of the measured run on {args.cores} cores: {own / 3600:.2f} h ({own / wall - 1:+.1%} of its wall)")
    grid = parse_log(open(args.dag).read())
    missing = sorted({" ".join(j.key) for j in grid if j.key not in by_key and j.outputs})
    if missing:
        raise SystemExit("no measured job matches:\n  " + "\n  ".join(missing))
    seconds = {j.jobid: by_key.get(j.key, 0.0) for j in grid}
    total = replay(grid, seconds, args.cores)
    for rule in sorted({j.rule for j in grid}):
        js = [j for j in grid if j.rule == rule]
        print(f"  {rule:<16} {len(js):>3} jobs {sum(seconds[j.jobid] for j in js) / 3600:6.2f} cpu-h")
    print(f"whole grid: {len(grid)} jobs, replayed on {args.cores} cores")
    print(f"grid_hours={total / 3600:.2f} cpu_hours={sum(seconds.values()) / 3600:.2f}")


if __name__ == "__main__":
    main()
