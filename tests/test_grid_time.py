"""benchmarks/grid_time.py: job durations read from a Snakemake log, replayed on C cores, other seeds costed as
the measured one."""

import importlib.util
import sys
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("grid_time", Path(__file__).parents[1] / "benchmarks" / "grid_time.py")
grid_time = importlib.util.module_from_spec(spec)
sys.modules["grid_time"] = grid_time  # dataclasses look their module up
spec.loader.exec_module(grid_time)


def job(stamp, rule, jobid, outputs, inputs=()):
    lines = [f"[Mon Nov 23 19:{stamp} 2026]", f"localrule {rule}:"]
    if inputs:
        lines.append(f"    input: {', '.join(inputs)}")
    return lines + [f"    output: {', '.join(outputs)}", f"    jobid: {jobid}", "    wildcards: seed=0"]


def finished(stamp, rule, jobid):
    return [f"[Mon Nov 23 19:{stamp} 2026]", f"Finished jobid: {jobid} (Rule: {rule})", "1 of 3 steps (33%) done"]


def log(seeds):
    """A prefix stage per seed (10 min) and a cell continuing from it (5 min), then a table over the cells (1 min);
    the seed-0 jobs timed."""
    lines = []
    for s in seeds:
        lines += job("00:00", "stage", 10 + s, [f"stages/seed{s}/prefix.pt"])
    lines += finished("10:00", "stage", 10)
    for s in seeds:
        lines += job("10:00", "train", 20 + s, [f"runs/seed{s}/metrics.json"], [f"stages/seed{s}/prefix.pt"])
    lines += finished("15:00", "train", 20)
    lines += job("15:00", "table", 30, ["table.csv"], [f"runs/seed{s}/metrics.json" for s in seeds])
    return lines + finished("16:00", "table", 30)


def test_log_is_parsed_into_jobs_with_files_and_durations():
    jobs = {j.jobid: j for j in grid_time.parse_log("\n".join(log([0])))}
    assert [jobs[i].seconds for i in (10, 20, 30)] == [600, 300, 60]
    assert jobs[20].inputs == ["stages/seed0/prefix.pt"] and jobs[20].outputs == ["runs/seed0/metrics.json"]
    assert jobs[10].key == ("stage", "stages/seed*/prefix.pt")


@pytest.mark.parametrize("cores, minutes", [(1, 3 * 15 + 1), (2, 10 + 10 + 5 + 1), (3, 10 + 5 + 1)])
def test_three_seeds_replayed_from_one_measured_seed(cores, minutes):
    measured = {j.key: j.seconds for j in grid_time.parse_log("\n".join(log([0])))}
    grid = grid_time.parse_log("\n".join(log([0, 1, 2])))
    seconds = {j.jobid: measured[j.key] for j in grid}
    # 2 cores: two prefixes (10), the third prefix beside the first two cells (10), its cell (5), the table (1)
    assert grid_time.replay(grid, seconds, cores) == pytest.approx(60 * minutes)


def test_a_cycle_is_reported():
    jobs = grid_time.parse_log("\n".join(job("00:00", "train", 1, ["a"], ["b"]) + finished("01:00", "train", 1)))
    jobs.append(grid_time.Job("stage", 2, inputs=["a"], outputs=["b"]))  # a cycle: neither can start
    with pytest.raises(ValueError, match="wait on each other"):
        grid_time.replay(jobs, {1: 60.0, 2: 60.0}, 2)
