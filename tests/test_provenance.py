"""Each cell records where it ran (issue 40) — in metrics.json and as MLflow tags, never in its identity — and a
table built from cells of several kinds of machine says so and widens its verdicts' floor."""

import importlib.util
import json
import shutil

import pandas as pd
import pytest
import torch
from conftest import REPO
from test_tracking import cell  # noqa: F401 (the fixture: a tiny tracked FedAvg cell)

from fed import engine as engine_module
from fed import provenance
from fed.export import export_reference
from fed.grid import Grid
from fed.reference import stale_reasons
from fed.reporting.tables import build_table, collect_runs, machine_note, mixes_machines
from fed.reporting.verdicts import Tolerance, verdict
from fed.validate import checked_files

FIELDS = {"cpu", "cpu_capability", "torch", "device", "gpu", "threads"}
AVX2 = {"cpu": "AMD EPYC", "cpu_capability": "AVX2", "torch": "2.14.1", "device": "cpu", "gpu": None, "threads": 1}
AVX512 = AVX2 | {"cpu": "Intel Xeon", "cpu_capability": "AVX512"}
H100 = AVX512 | {"device": "cuda:0", "gpu": "NVIDIA H100 80GB HBM3"}


def test_kinds_tags_and_the_caption_sentence():
    """A kind is the GPU, else the CPU's kernel set and model: an AMD EPYC and an Intel Xeon, both AVX-512, round the
    same cell differently (docs/results/headtohead.md, "The same cells on another CPU")."""
    assert provenance.kind({}) == "not recorded"
    assert provenance.kind({"machine": AVX2}) == "cpu AVX2 (AMD EPYC)"
    assert provenance.kind({"machine": AVX2 | {"cpu_capability": "AVX512"}}) == "cpu AVX512 (AMD EPYC)"
    assert provenance.kind({"machine": AVX512}) == "cpu AVX512 (Intel Xeon)"
    assert provenance.kind({"machine": AVX2 | {"cpu": ""}}) == "cpu AVX2"  # no model name to tell
    assert provenance.kind({"machine": H100}) == "cuda NVIDIA H100 80GB HBM3"
    assert provenance.kind({"machine": AVX2 | {"earlier": [AVX512]}}) == "cpu AVX512 (Intel Xeon) + cpu AVX2 (AMD EPYC)"
    assert provenance.tags({"machine": AVX2})["machine.cpu_capability"] == "AVX2"
    assert provenance.tags({"machine": AVX2})["machine.kind"] == "cpu AVX2 (AMD EPYC)"
    assert provenance.tags({}) == {}
    assert provenance.mix_note(["cpu AVX2"] * 3) == ""
    assert provenance.mix_note(["not recorded"] * 2) == "Machine not recorded (the cells predate the record)."
    note = provenance.mix_note(["cpu AVX2", "cpu AVX512", "cpu AVX512", "not recorded"])
    assert note.startswith("Mixed machines: 2 on cpu AVX512, 1 on cpu AVX2, 1 on not recorded cells;")


def test_a_cell_records_where_it_ran_in_metrics_json_and_mlflow(cell):  # noqa: F811
    run, runs, _, tmp_path = cell
    run()
    machine = json.loads((tmp_path / "out/metrics.json").read_text())["machine"]
    assert set(machine) == FIELDS
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert (machine["torch"], machine["device"], machine["gpu"]) == (torch.__version__, "cpu", None)
    assert machine["threads"] == torch.get_num_threads() and machine["cpu"] == provenance.cpu_model()
    # a checkpoint carries it and still loads as weights only (warm starts, stage files: fed.checkpoint.load_file)
    assert torch.load(tmp_path / "work/checkpoint.pt", weights_only=True)["machines"] == [machine]
    tags = runs()[0].data.tags
    assert tags["machine.cpu_capability"] == machine["cpu_capability"]
    assert tags["machine.kind"] == f"cpu {machine['cpu_capability']} ({machine['cpu']})"
    assert not any(k.startswith("machine") for k in runs()[0].data.params)  # tags, not the run's params


def test_where_it_ran_is_not_its_identity_and_a_resume_elsewhere_records_both(cell, monkeypatch):  # noqa: F811
    """A run killed after round 2 resumes on "another CPU" (provenance.machine patched): the checkpoint is the same
    identity, so it resumes and the history equals an uninterrupted run's; the record names both machines."""
    run, runs, _, tmp_path = cell
    through = run()
    shutil.rmtree(tmp_path / "work")
    real = engine_module.evaluate

    def killed_at_round_3(ctx):
        if ctx.round == 3:
            raise KeyboardInterrupt
        return real(ctx)

    monkeypatch.setattr(engine_module, "evaluate", killed_at_round_3)
    monkeypatch.setattr(provenance, "machine", lambda device: AVX512)
    with pytest.raises(KeyboardInterrupt):
        run()
    monkeypatch.setattr(engine_module, "evaluate", real)
    monkeypatch.setattr(provenance, "machine", lambda device: AVX2)
    resumed = run()
    assert resumed["identity"] == through["identity"] and len(runs()) == 1
    strip = [{k: v for k, v in r.items() if "seconds" not in k} for r in resumed["history"]]
    assert strip == [{k: v for k, v in r.items() if "seconds" not in k} for r in through["history"]]
    assert resumed["machine"] == AVX2 | {"earlier": [AVX512]}
    assert provenance.kind(resumed) == "cpu AVX512 (Intel Xeon) + cpu AVX2 (AMD EPYC)"


def test_a_committed_cell_with_the_new_fields_stays_current_and_exports_them(tmp_path):
    """Adding the machine to a committed cell stales nothing: fed.reference's settings check, and the Grid's choice
    of the committed copy over training (what Snakemake's input functions ask), both still read it as current."""
    config, _ = checked_files([str(REPO / "config/dafl_fmnist.yaml")], REPO)
    rel = "dafl/fmnist/2-label/fedavg/seed0"
    shutil.copytree(REPO / "reference/dafl_fmnist", tmp_path / "reference")
    path = tmp_path / "reference/runs" / rel / "metrics.json"
    record = json.loads(path.read_text())
    assert "machine" not in record and provenance.kind(record) == "not recorded"  # it predates the record
    grid = Grid({**config, "reference_dir": str(tmp_path / "reference")}, root=REPO)
    assert grid.reference_is_current("dafl", "fmnist", "2-label", "fedavg", 0)
    path.write_text(json.dumps(record | {"machine": AVX2}, indent=1))
    grid = Grid({**config, "reference_dir": str(tmp_path / "reference")}, root=REPO)
    assert grid.reference_is_current("dafl", "fmnist", "2-label", "fedavg", 0)
    assert grid.cell_path("dafl", "fmnist", "2-label", "fedavg", 0).startswith(str(tmp_path / "reference"))
    with_machine = json.loads(path.read_text())
    spec = {"scheme": record["partition"]["scheme"], **record["partition"]["params"]}
    assert stale_reasons(with_machine, record["config"], "fedavg", record["method"]["params"], spec) == []
    # fed export-reference keeps the field
    results = tmp_path / "project/results"
    shutil.copytree(tmp_path / "reference/runs/dafl/fmnist/2-label/fedavg", results / "runs/dafl/fmnist/2-label/fedavg")
    export_reference(results, tmp_path / "exported")
    exported = json.loads((tmp_path / "exported/runs" / rel / "metrics.json").read_text())
    assert exported["machine"] == AVX2


def write_cell(tmp_path, name, value, machine):
    path = tmp_path / f"{name}.json"
    record = {"diverged": False, "last": {"global_acc": value}, "best": {"global_acc": value}}
    path.write_text(json.dumps(record | ({"machine": machine} if machine else {})))
    return {"dataset": "d", "partition": "p", "method": "m", "seed": int(name[-1]), "path": path}


def test_a_table_of_several_machines_says_so_and_raises_its_verdicts_floor(tmp_path):
    """Paper 80 ± 0; ours 82.5 on three seeds: above the default floor (2 pp), within the cross-machine one (2.8)."""
    one = collect_runs([write_cell(tmp_path, f"s{i}", 82.5, AVX2) for i in range(3)])
    mixed = collect_runs([write_cell(tmp_path, f"t{i}", 82.5, m) for i, m in enumerate([AVX2, AVX512, None])])
    assert not mixes_machines(one) and machine_note(one) == ""
    assert mixes_machines(mixed) and machine_note(mixed).startswith(
        "Mixed machines: 1 on cpu AVX2 (AMD EPYC), 1 on cpu AVX512 (Intel Xeon)"
    )
    makes = [AVX2 | {"cpu_capability": "AVX512"}, AVX512, AVX512]  # one kernel set, two makes of CPU
    assert mixes_machines(collect_runs([write_cell(tmp_path, f"u{i}", 82.5, m) for i, m in enumerate(makes)]))
    assert not mixes_machines(collect_runs([write_cell(tmp_path, f"v{i}", 82.5, AVX512) for i in range(2)]))
    tolerance = Tolerance()
    assert verdict(82.5, 0.0, 3, 0, 80.0, 0.0, tolerance=tolerance) == "above paper"
    assert verdict(82.5, 0.0, 3, 0, 80.0, 0.0, tolerance=tolerance.across_machines()) == "reproduced"
    assert Tolerance(floor=3.0).across_machines().floor == 3.0  # never narrower than the configured floor
    paper = pd.DataFrame(
        [{"table": "T", "dataset": "d", "partition": "p", "method": "m", "metric": "global_acc", "value": "80"}]
    ).assign(std="", read_uncertainty="")
    args = ("T", ["d"], ["p"], {"m": "m"}, ["global_acc"], "last", {"m"})
    assert build_table(mixed, paper, *args, tolerance=tolerance.across_machines()).verdict[0] == "reproduced"
    assert "max(2.8," in tolerance.across_machines().describe()


def test_the_committed_rerun_on_an_avx2_cpu_records_it_and_is_current():
    """reference/headtohead_cpu_avx2: one head-to-head cell re-run by the pipeline and exported with its machine
    (docs/results/headtohead.md, "The same cells on another CPU"); it stands for the CPU overlay's cell, and differs
    from the committed one (another CPU) and from the Xeon's by rounding only."""
    config, _ = checked_files([str(REPO / f"config/{f}.yaml") for f in ("headtohead", "headtohead_cpu")], REPO)
    grid = Grid({**config, "reference_dir": "reference/headtohead_cpu_avx2"}, root=REPO)
    key = ("headtohead_cpu", "fmnist", "h2h_dir0.1", "fedavg", 0)
    assert grid.reference_is_current(*key)
    rerun = json.loads(open(grid.cell_path(*key)).read())
    assert provenance.kind(rerun) == "cpu AVX2 (AMD EPYC)" and set(rerun["machine"]) == FIELDS
    committed = json.loads(
        (REPO / "reference/headtohead_cpu/runs" / "/".join(key[:4]) / "seed0/metrics.json").read_text()
    )
    assert provenance.kind(committed) == "not recorded"
    assert rerun["last"]["global_acc"] != committed["last"]["global_acc"]  # another CPU: not bitwise
    assert abs(rerun["last"]["global_acc"] - committed["last"]["global_acc"]) < 2.8


def test_compare_machines_says_where_two_runs_of_a_cell_part(tmp_path, capsys, monkeypatch):
    """scripts/compare_machines.py: digit for digit, a cell rerun on another machine against its committed copy."""
    spec = importlib.util.spec_from_file_location("compare_machines", REPO / "scripts/compare_machines.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    history = [{"round": r, "train_loss": 1.0 / r} for r in (1, 2, 3)]
    tuning = {"scores": [{"lr": 0.01, "validation_pooled_acc": 60.0}, {"lr": 0.02, "validation_pooled_acc": 61.5}]}
    committed = {"machine": AVX2 | {"cpu_capability": "AVX512"}, "history": history, "tuning": tuning,
                 "last": {"global_acc": 80.0}}  # fmt: skip
    same = committed | {"machine": AVX512}
    later = [*history[:2], {"round": 3, "train_loss": 1.0 / 3 + 0.25}]
    scores = {"scores": [tuning["scores"][0], {"lr": 0.02, "validation_pooled_acc": 61.25}]}
    moved = same | {"history": later, "tuning": scores, "last": {"global_acc": 80.125}}
    assert script.compare(committed, same) == {
        "committed on": "cpu AVX512 (AMD EPYC)", "here": "cpu AVX512 (Intel Xeon)", "tuning equal": "true",
        "rounds equal": "3 of 3", "first differs": "–", "largest Δ loss": "0",
        "global_acc": "80.00 → 80.00"}  # fmt: skip
    assert script.compare(committed, moved) | {"committed on": None, "here": None} == {
        "committed on": None, "here": None, "tuning equal": "false", "rounds equal": "2 of 3", "first differs": 3,
        "largest Δ loss": "0.25", "global_acc": "80.00 → 80.12"}  # fmt: skip
    assert script.compare(committed | {"tuning": None}, same)["tuning equal"] == "–"  # an untuned cell
    for root, record in (("ref", committed), ("here", moved)):
        (tmp_path / root / "runs/c").mkdir(parents=True)
        (tmp_path / root / "runs/c/metrics.json").write_text(json.dumps(record))
    monkeypatch.setattr("sys.argv", ["compare_machines.py", str(tmp_path / "ref"), str(tmp_path / "here"), "c"])
    script.main()
    header, rule, row = capsys.readouterr().out.splitlines()
    assert header.count("|") == rule.count("|") == row.count("|") == 9 and row.startswith("| c | cpu AVX512 (AMD")
