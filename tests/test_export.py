"""Committing finished cells (``fed.export``): ``fed export-reference`` copies a cell's record (never its weights) to
a reference folder, all cells or the named ones, and ``fed campaign --export`` does it for each cell as it finishes;
campaigns exporting at once never lose each other's manifest entries."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from fed import campaign
from fed.export import export_reference

RECORD = {"partition_file": "partitions/x.json", "partition": {"scheme": "iid"}, "last": {"global_acc": 50.0}}


def finished_cell(results: Path, cell: str, acc: float = 50.0, commit: str = "abc123") -> Path:
    """A cell as a run leaves it: metrics.json (its commit in its tags), history.csv, benchmark.tsv, and weights."""
    out = results / "runs" / cell
    out.mkdir(parents=True, exist_ok=True)
    (out / "history.csv").write_text(f"round,global_acc\n1,{acc}\n")
    (out / "benchmark.tsv").write_text("s\tmax_rss\n1.0\t100\n")
    (out / "model.pt").write_bytes(b"weights")
    record = RECORD | {"last": {"global_acc": acc}, "tracking": {"tags": {"git_commit": commit}}}
    (out / "metrics.json").write_text(json.dumps(record))
    return out


def test_export_copies_the_named_cells_records_never_weights_and_keeps_the_manifest_s_other_entries(tmp_path):
    results, reference = tmp_path / "results", tmp_path / "reference"
    for seed in (0, 1, 2):
        finished_cell(results, f"p/d/iid/fedavg/seed{seed}", acc=50.0 + seed, commit=f"c{seed}")
    (results / "runs/p/d/iid/fedavg/seed3").mkdir()  # a cell still running: no metrics.json yet
    assert export_reference(results, reference, ["p/d/iid/fedavg/seed0"]) == ["p/d/iid/fedavg/seed0"]
    assert export_reference(results, reference, ["p/d/iid/fedavg/seed2"]) == ["p/d/iid/fedavg/seed2"]
    copied = sorted(str(p.relative_to(reference)) for p in reference.rglob("*") if p.is_file())
    assert copied == ["MANIFEST.json"] + [
        f"runs/p/d/iid/fedavg/seed{s}/{f}" for s in (0, 2) for f in ("benchmark.tsv", "history.csv", "metrics.json")
    ]
    assert json.loads((reference / "MANIFEST.json").read_text()) == {
        "cells": {"p/d/iid/fedavg/seed0": "c0", "p/d/iid/fedavg/seed2": "c2"}
    }
    assert json.loads((reference / "runs/p/d/iid/fedavg/seed2/metrics.json").read_text())["last"]["global_acc"] == 52
    with pytest.raises(ValueError, match=r"not finished .*\['p/d/iid/fedavg/seed3'\]"):
        export_reference(results, reference, ["p/d/iid/fedavg/seed1", "p/d/iid/fedavg/seed3"])
    assert not (reference / "runs/p/d/iid/fedavg/seed1").exists()  # nothing copied before the error
    assert export_reference(results, reference) == [f"p/d/iid/fedavg/seed{s}" for s in (0, 1, 2)]  # every finished
    assert len(json.loads((reference / "MANIFEST.json").read_text())["cells"]) == 3


def test_export_reference_s_command_line_names_cells_and_an_unfinished_one_is_a_clear_error(tmp_path):
    finished_cell(tmp_path / "results", "p/d/iid/fedavg/seed0")
    finished_cell(tmp_path / "results", "p/d/iid/fedavg/seed1")
    argv = [sys.executable, "-m", "fed", "export-reference", "results", "reference"]
    proc = subprocess.run([*argv, "--cell", "p/d/iid/fedavg/seed1"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "1 finished cells in reference"
    assert [p.name for p in (tmp_path / "reference/runs/p/d/iid/fedavg").iterdir()] == ["seed1"]
    proc = subprocess.run([*argv, "--cell", "p/d/iid/fedavg/seed9"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1 and "fed export-reference: not finished" in proc.stderr and "seed9" in proc.stderr


def test_campaigns_exporting_at_once_keep_every_manifest_entry(tmp_path):
    """Two processes export 100 cells each, one at a time and from the same moment, into one reference folder:
    every entry is kept (the manifest is read, updated and replaced under a lock on the folder)."""
    results, n = tmp_path / "results", 100
    for who in ("a", "b"):
        for k in range(n):
            finished_cell(results, f"p/d/iid/{who}/seed{k}")
    script = (
        "import sys, time; from pathlib import Path; from fed.export import export_reference\n"
        "results, reference, who, go, n = sys.argv[1:]\n"
        "while not Path(go).exists(): time.sleep(0.01)\n"
        "for k in range(int(n)): export_reference(Path(results), Path(reference), [f'p/d/iid/{who}/seed{k}'])"
    )
    go = tmp_path / "go"
    argv = [sys.executable, "-c", script, str(results), str(tmp_path / "ref")]
    procs = [subprocess.Popen([*argv, who, str(go), str(n)]) for who in "ab"]
    go.touch()
    assert [p.wait() for p in procs] == [0, 0]
    assert len(json.loads((tmp_path / "ref/MANIFEST.json").read_text())["cells"]) == 2 * n
    assert not list((tmp_path / "ref").glob(".*.tmp"))  # no temporary file left behind


def train(job, stop_at, threads):
    """A pool worker's job: the cell's files, as ``fed.runner`` writes them; the cell before it is exported by now."""
    if job["label"] == "seed1" and not Path("reference/x/runs/p/d/iid/fedavg/seed0/metrics.json").exists():
        raise AssertionError("seed0 was not exported before seed1 started")
    finished_cell(Path("results"), str(Path(job["out"]).parent.relative_to("results/runs")))
    return "done"


def test_a_campaign_with_export_copies_each_cell_as_it_finishes_and_refuses_a_cell_with_nowhere_to_go(
    tmp_path, monkeypatch
):
    """``fed campaign --export``: each done cell is in its config's reference_dir before the next job starts (a
    machine lost mid-campaign loses no finished cell's record); a planned cell whose config has no reference_dir is
    an error before any job runs."""
    monkeypatch.chdir(tmp_path)
    where = {"results": "results", "reference": "reference/x"}

    def cell(seed, export=where):
        out = f"results/runs/p/d/iid/fedavg/seed{seed}/metrics.json"
        return {"kind": "cell", "out": out, "rank": [0, seed, 1], "needs": [], "label": f"seed{seed}", "args": {},
                "export": export}  # fmt: skip

    log = io.StringIO()
    plan = {"version": campaign.PLAN_VERSION, "jobs": [cell(0), cell(1)]}
    outcome = campaign.run(plan, minutes=5, jobs=1, work=train, log=log, export=True)
    assert outcome["done"] == ["seed0", "seed1"]
    assert "exported seed1 to reference/x (to commit)" in log.getvalue()
    assert set(json.loads(Path("reference/x/MANIFEST.json").read_text())["cells"]) == {
        "p/d/iid/fedavg/seed0",
        "p/d/iid/fedavg/seed1",
    }
    assert not Path("reference/x/runs/p/d/iid/fedavg/seed0/model.pt").exists()
    plan = {"version": campaign.PLAN_VERSION, "jobs": [cell(2), cell(3, export=None)]}
    with pytest.raises(ValueError, match="no reference_dir for 1 cells \\(the first: seed3\\): their config sets none"):
        campaign.run(plan, minutes=5, work=train, export=True)
    assert not Path("results/runs/p/d/iid/fedavg/seed2").exists()  # no job ran


def test_a_plan_records_where_each_cell_is_committed(tmp_path, monkeypatch):
    """A cell's job carries its config's results_dir and reference_dir, as the config states them (relative to
    the repository, where a campaign runs): a plan written here exports there."""
    monkeypatch.chdir(tmp_path)
    smoke = campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, [TABLE := "dafl_table3"])
    assert {j["kind"]: j.get("export") for j in smoke["jobs"]}["cell"] is None  # smoke.yaml commits nothing
    overlay = tmp_path / "ref.yaml"
    overlay.write_text("reference_dir: reference/smoke\n")
    plan = campaign.plan([[str(REPO / "config/smoke.yaml"), str(overlay)]], REPO, [TABLE])
    exports = [j["export"] for j in plan["jobs"] if j["kind"] == "cell"]
    assert exports and all(e == {"results": "results", "reference": "reference/smoke"} for e in exports)


def test_campaign_s_export_flag_reaches_the_run_and_its_error_is_clear(tmp_path):
    """``fed campaign --plan FILE --export``: a cell with no reference_dir to go to ends the command with the reason,
    before any job starts."""
    job = {"kind": "cell", "out": "results/runs/x/metrics.json", "rank": [0, 0, 1], "needs": [], "label": "x",
           "args": {}}  # fmt: skip
    (tmp_path / "plan.json").write_text(json.dumps({"version": campaign.PLAN_VERSION, "jobs": [job]}))
    argv = [sys.executable, "-m", "fed", "campaign", "--plan", "plan.json", "--minutes", "1", "--export"]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1 and "fed campaign: --export: no reference_dir for 1 cells" in proc.stderr
    assert not (tmp_path / "results").exists()
