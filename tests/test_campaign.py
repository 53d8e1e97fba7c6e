"""``fed campaign``: the cells a config misses, planned where Snakemake is and run where only PyTorch is (as on a lent
GPU machine), with the workflow's numbers in the workflow's layout; out of time, a cell checkpoints and the next call
finishes it as if it had never stopped."""

import contextlib
import dataclasses
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from conftest import REPO, snakemake, write_yaml

from fed import campaign, checkpoint
from fed.config import FLConfig
from fed.device import resolve_device
from fed.dpgan import PSGSettings, client_code
from fed.export import export_reference
from fed.provenance import kind, machine

TABLE = "dafl_table3"  # a table with a preparatory stage (DA-FL's GANs): data, partitions, stages, cells


def fed(*args, cwd, env=None):
    proc = subprocess.run([sys.executable, "-m", "fed", *args], cwd=cwd, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def without(tmp_path: Path, *modules: str) -> dict:
    """An environment in which ``modules`` cannot be imported, in the worker processes too."""
    blocker = tmp_path / "blocked"
    for name in modules:
        (blocker / name).mkdir(parents=True)
        (blocker / name / "__init__.py").write_text(f"raise ImportError('{name} is not on this machine')")
    return os.environ | {"PYTHONPATH": f"{blocker}{os.pathsep}{REPO / 'src'}"}


def timeless(last: dict) -> dict:
    """A round's metrics without its wall seconds (the only number two runs of one cell may differ in)."""
    return {k: v for k, v in last.items() if k != "seconds"}


def cells(results: Path) -> dict[str, dict]:
    found = sorted(results.glob("runs/**/metrics.json"))
    return {str(m.parent.relative_to(results)): json.loads(m.read_text()) for m in found}


def test_a_plan_runs_without_snakemake_or_mlflow_and_gives_the_workflow_s_cells(smoke_run, tmp_path, monkeypatch):
    workdir, _ = smoke_run
    monkeypatch.chdir(tmp_path)  # the plan's paths are relative to the working directory, as the workflow's
    fed("campaign", str(REPO / "config/smoke.yaml"), "--table", TABLE, "--write-plan", "plan.json", cwd=tmp_path)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert [j["kind"] for j in plan["jobs"]][:4] == ["data", "partition", "stage", "cell"]  # seed 0's first
    assert [j["args"]["seed"] for j in plan["jobs"] if j["kind"] == "cell"] == [0, 0, 0, 1, 1, 1]

    env = without(tmp_path, "snakemake", "mlflow", "jsonschema")
    proc = fed("campaign", "--plan", "plan.json", "--minutes", "20", "--jobs", "2", "--threads", "1", cwd=tmp_path,
               env=env)  # fmt: skip
    outcome = json.loads(proc.stdout)
    assert len(outcome["done"]) == len(plan["jobs"]) == 11 and not outcome["failed"], outcome
    assert "done cell smoke_dafl/synthetic/1-label/fedavg/seed0" in proc.stderr  # progress, job by job

    ours, workflow = cells(tmp_path / "results"), cells(workdir / "results")
    assert len(ours) == 6 and ours.keys() <= workflow.keys()
    for cell, record in ours.items():
        assert record["identity"] == workflow[cell]["identity"], cell
        assert timeless(record["last"]) == timeless(workflow[cell]["last"]), cell
        assert record["shared"] == workflow[cell]["shared"], cell
        assert record["tracking"]["tags"]["paper"] == workflow[cell]["tracking"]["tags"]["paper"]
    assert len(export_reference(tmp_path / "results", tmp_path / "reference")) == 6  # what gets committed

    again = campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, [TABLE])
    assert again["jobs"] == []  # nothing missing any more
    paces = {str(Path(p["cell"]).parent.relative_to("results")): (alg, p["pace"], p["rounds"], p["machine"])
             for alg, ps in again["paces"].items() for p in ps}  # fmt: skip
    assert paces == {  # the finished cells' paces, for the cells still to run
        cell: (r["tracking"]["tags"]["algorithm"], pytest.approx(median_round(r)), r["rounds_completed"], kind(r))
        for cell, r in ours.items()
    }


def test_a_cell_out_of_time_checkpoints_and_the_next_call_finishes_it(smoke_run, tmp_path, monkeypatch):
    workdir, _ = smoke_run
    monkeypatch.chdir(tmp_path)
    plan = campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, [TABLE])
    fedavg = next(j for j in plan["jobs"] if j["label"] == "smoke_dafl/synthetic/1-label/fedavg/seed0")
    for job in plan["jobs"]:
        if job["kind"] in ("data", "partition") and job["out"] in fedavg["needs"]:
            assert campaign.run_job(job, time.time() + 600, 1) == "done"
    assert campaign.run_job(fedavg, time.time() - 1, 1) == "checkpointed"  # past its deadline after round 1
    out = Path(fedavg["args"]["out_dir"])
    assert not (out / "metrics.json").exists() and any(Path(fedavg["args"]["work_dir"]).iterdir())
    rows = {r["job"]: r for r in campaign.status(plan)}
    row = rows[fedavg["label"]]
    [first] = torch.load(Path(fedavg["args"]["work_dir"]) / "checkpoint.pt", weights_only=False)["history"]
    assert (row["state"], row["progress"][:11]) == ("stopped", "round 1/2, ") and row["spent"] >= first["seconds"]
    assert row["left"] == first["seconds"] > 0 and not row["estimated"]  # one round left at its round's pace
    later = rows["smoke_dafl/synthetic/1-label/fedavg/seed1"]  # not started: at its algorithm's timed cell's pace
    assert (later["state"], later["spent"], later["estimated"]) == ("waiting", None, True)
    assert later["left"] == 2 * first["seconds"]
    campaign.write_plan(plan, "plan.json")
    proc = fed("campaign", "--plan", "plan.json", "--status", cwd=tmp_path)  # beside a campaign: reads only
    assert fedavg["label"] in proc.stdout and "round 1/2" in proc.stdout and "stopped" in proc.stdout
    assert campaign.run_job(fedavg, time.time() + 600, 1) == "done"
    record = json.loads((out / "metrics.json").read_text())
    row = next(r for r in campaign.status(plan) if r["job"] == fedavg["label"])
    acc = record["last"]["global_acc"]
    assert (row["state"], row["progress"], row["left"]) == ("done", f"round 2, {acc:.2f} %", 0)
    assert row["spent"] == record["wall_seconds"]
    reference = json.loads((workdir / "results" / out.relative_to("results") / "metrics.json").read_text())
    assert record["rounds_completed"] == 2 and timeless(record["last"]) == timeless(reference["last"])
    assert [r["train_loss"] for r in record["history"]] == [r["train_loss"] for r in reference["history"]]


def test_a_campaign_names_what_it_cannot_run_before_it_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = {"kind": "cell", "out": "results/runs/x/metrics.json", "rank": [0, 0, 1], "needs": ["partitions/x.json"],
           "label": "x", "args": {}}  # fmt: skip
    with pytest.raises(ValueError, match=r"inputs neither planned nor present: \['partitions/x.json'\]"):
        campaign.run({"version": campaign.PLAN_VERSION, "jobs": [job]}, minutes=1)
    (tmp_path / "old.json").write_text(json.dumps({"version": 0, "jobs": []}))
    with pytest.raises(ValueError, match="version 0"):
        campaign.read_plan(tmp_path / "old.json")
    with pytest.raises(ValueError, match=r"no table or figure \['nope'\]"):
        campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, ["nope"])
    proc = subprocess.run([sys.executable, "-m", "fed", "campaign", "--minutes", "1"], capture_output=True, text=True)
    assert proc.returncode == 2 and "give configs to plan from, or --plan FILE" in proc.stderr
    argv = [sys.executable, "-m", "fed", "campaign", "--plan", "old.json", "--partition", "2-label", "--status"]
    proc = subprocess.run(argv, capture_output=True, text=True)  # a narrowing a written plan would ignore
    assert proc.returncode == 2 and "--plan runs its file whole" in proc.stderr


def test_a_plan_narrowed_to_partitions_holds_their_cells_and_only_their_inputs(tmp_path, monkeypatch):
    """``--partition``, alone or with ``--method``: the plan keeps the cells on the named partitions, in the
    whole plan's order, with their partitions and stages; an unknown name is an error before anything is planned."""
    monkeypatch.chdir(tmp_path)
    config = [[str(REPO / "config/smoke.yaml")]]

    def labels(plan_, kind="cell"):
        return [j["label"] for j in plan_["jobs"] if j["kind"] == kind]

    whole, narrow = campaign.plan(config, REPO), campaign.plan(config, REPO, partitions=["dir0.1"])
    assert labels(narrow) == [c for c in labels(whole) if "/dir0.1/" in c] and len(labels(narrow)) < len(labels(whole))
    assert labels(narrow) and narrow["partitions"] == ["dir0.1"]
    inputs = [j["out"] for j in narrow["jobs"] if j["kind"] in ("partition", "stage")]
    assert inputs and all("/dir0.1/" in out for out in inputs)
    both = campaign.plan(config, REPO, [TABLE], ["dafl_gamma0.05"], ["1-label"])
    assert labels(both) == [f"smoke_dafl/synthetic/1-label/dafl_gamma0.05/seed{s}" for s in (0, 1)]
    assert len(labels(both, "stage")) == 2  # each seed's GAN stage
    with pytest.raises(ValueError, match=r"no partition \['nope'\]"):
        campaign.plan(config, REPO, partitions=["nope"])
    proc = subprocess.run([sys.executable, "-m", "fed", "campaign", str(REPO / "config/smoke.yaml"), "--partition",
                           "nope", "--write-plan", "p.json"], capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 1 and "no partition ['nope']" in proc.stderr and not Path("p.json").exists()


def test_an_audited_table_s_cells_are_audited_after_them_as_rule_audit_audits_them(smoke_run, tmp_path, monkeypatch):
    """A table with ``audit: true`` (the head-to-head under its protocol): each cell's audit is planned after it and
    writes rule audit's record, equal to the workflow's for the same cell but for the jobs' costs, which the
    campaign's cell and stage write as Snakemake's ``benchmark:`` does; a finished cell whose audit is missing or
    older than its record gets one where its model is, and one whose model is gone is named, not planned."""
    workdir = shutil.copytree(smoke_run[0], tmp_path / "workflow", symlinks=True)  # the shared run stays unaudited
    monkeypatch.chdir(tmp_path)
    smoke, overlay = (
        str(REPO / "config/smoke.yaml"),
        write_yaml(tmp_path / "audit.yaml", {"tables": {"leaderboard": {"audit": True}}}),
    )
    cell = "results/runs/smoke/synthetic/multimodal/fedzdas/seed{}"
    snakemake(workdir, f"{cell.format(0)}/audit.json", "--cores", "1", "--configfile", smoke, overlay)
    config = [[smoke, str(overlay)]]
    todo = campaign.plan(config, REPO, ["leaderboard"], ["fedzdas"], ["multimodal"])
    order = [(j["kind"], j["label"][-1]) for j in todo["jobs"] if j["kind"] in ("cell", "audit")]
    assert order == [("cell", "0"), ("audit", "0"), ("cell", "1"), ("audit", "1")]
    audit = next(j for j in todo["jobs"] if j["kind"] == "audit")
    assert audit["out"] == f"{cell.format(0)}/audit.json" and f"{cell.format(0)}/metrics.json" in audit["needs"]
    campaign.write_plan(todo, "plan.json")
    fed("campaign", "--plan", "plan.json", "--minutes", "20", "--jobs", "1", "--threads", "1", cwd=tmp_path)

    ours = json.loads((tmp_path / cell.format(0) / "audit.json").read_text())
    theirs = json.loads((workdir / cell.format(0) / "audit.json").read_text())
    assert {k: v for k, v in ours.items() if k != "jobs"} == {k: v for k, v in theirs.items() if k != "jobs"}
    assert ours["jobs"].keys() == theirs["jobs"].keys()  # the train job's and Fed-ZDAS' FedAvg prefix's
    assert ours["jobs"]["train"]["max_rss_mb"] > 0 and any(
        k.startswith("stage warm: fedavg_prefix") for k in ours["jobs"]
    )

    assert campaign.plan(config, REPO, ["leaderboard"], ["fedzdas"], ["multimodal"])["jobs"] == []
    os.utime(tmp_path / cell.format(1) / "audit.json", (0, 0))  # older than its cell (run again since): audited again
    again = campaign.plan(config, REPO, ["leaderboard"], ["fedzdas"], ["multimodal"])
    assert [(j["kind"], j["out"]) for j in again["jobs"]] == [("audit", f"{cell.format(1)}/audit.json")]
    (tmp_path / cell.format(1) / "audit.json").unlink()  # none at all: the same
    assert campaign.plan(config, REPO, ["leaderboard"], ["fedzdas"], ["multimodal"])["jobs"] == again["jobs"]
    (tmp_path / cell.format(1) / "model.pt").unlink()
    gone = campaign.plan(config, REPO, ["leaderboard"], ["fedzdas"], ["multimodal"])
    assert gone["jobs"] == [] and gone["unaudited"] == ["smoke/synthetic/multimodal/fedzdas/seed1"]


def crash(job, stop_at, threads):
    """A worker that dies abruptly the first time it runs "boom" (a marker file remembers it), and always on "bad"."""
    marker = Path(job["out"]).with_suffix(".tried")
    if job["label"] == "bad" or (job["label"] == "boom" and not marker.exists()):
        marker.touch()
        os._exit(1)  # as the kernel's OOM killer or a kill -9 ends it: no exception, no clean-up
    Path(job["out"]).write_text("ok")
    return "done"


def test_a_dead_worker_costs_its_job_one_attempt_not_the_campaign(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    jobs = [{"kind": "cell", "out": f"{name}.out", "rank": [0, 0, 1], "needs": [], "label": name, "args": {}}
            for name in ("boom", "fine", "bad")]  # fmt: skip
    outcome = campaign.run({"version": campaign.PLAN_VERSION, "jobs": jobs}, minutes=5, jobs=1, work=crash)
    assert outcome["done"] == ["boom", "fine"] and outcome["waiting"] == []
    assert len(outcome["failed"]) == 1 and outcome["failed"][0].startswith(f"bad: its worker died {campaign.ATTEMPTS}")


def finish(job, stop_at, threads):
    Path(job["out"]).write_text("ran here")
    return "done"


def test_a_free_slot_takes_a_ready_cell_before_the_next_stage(tmp_path, monkeypatch):
    """Stage A is done and its cells are ready; stage B, earlier in the plan (as a seed's next partition's stage is,
    before that seed's cells), waits until they have run: their metrics can be committed, B's weights cannot.
    Otherwise the plan's order: A's cells in theirs, B's cell after B."""
    monkeypatch.chdir(tmp_path)

    def job(kind, name, rank, needs=()):
        return {"kind": kind, "out": name, "rank": rank, "needs": list(needs), "label": name, "args": {}}

    jobs = [job("stage", "A", [0, 1, 0]), job("stage", "B", [0, 1, 0]), job("cell", "a1", [0, 1, 1], ["A"]),
            job("cell", "a2", [0, 1, 1], ["A"]), job("cell", "b1", [0, 1, 1], ["B"])]  # fmt: skip
    log = io.StringIO()
    outcome = campaign.run({"version": campaign.PLAN_VERSION, "jobs": jobs}, minutes=5, jobs=1, work=finish, log=log)
    started = [line.split()[-1] for line in log.getvalue().splitlines() if "] start " in line]
    assert started == ["A", "a1", "a2", "B", "b1"] and outcome["done"] == started


def test_campaigns_sharing_a_results_directory_never_run_the_same_job(tmp_path, monkeypatch):
    """A job another campaign holds (its lock: another process here) is left to it, and so is what needs it; a job
    another campaign finished after this one read its plan counts as done; no lock file outlives its job."""
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)
    jobs = [
        {"kind": "cell", "out": f"runs/{name}/metrics.json", "rank": [0, 0, 1], "needs": needs, "label": name,
         "args": {}}
        for name, needs in (("held", []), ("after_held", ["runs/held/metrics.json"]), ("free", []), ("gone", []))
    ]  # fmt: skip
    holder = subprocess.Popen(  # another campaign, in the middle of "held"
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from fed import campaign; "
         "h = campaign._claim('runs/held/metrics.json'); print('held', flush=True); sys.stdin.read()",
         str(REPO / "src")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        Path("runs/gone").mkdir(parents=True)
        real_claim = campaign._claim

        def claim(out):  # "gone" finishes in the other campaign between this one's plan and its start
            if out.startswith("runs/gone"):
                Path(out).write_text("ok")
            return real_claim(out)

        monkeypatch.setattr(campaign, "_claim", claim)
        log = io.StringIO()
        plan = {"version": campaign.PLAN_VERSION, "jobs": jobs}
        outcome = campaign.run(plan, minutes=5, jobs=1, work=finish, log=log)
        states = {r["job"]: r["state"] for r in campaign.status(plan)}
        holder.send_signal(signal.SIGSTOP)  # the other campaign paused: it still holds "held"
        os.waitpid(holder.pid, os.WUNTRACED)  # returns once it is stopped
        try:
            paused = {r["job"]: r["state"] for r in campaign.status(plan)}["held"]
        finally:
            holder.send_signal(signal.SIGCONT)
    finally:
        holder.communicate("")
    assert paused == f"paused (pid {holder.pid})"
    assert states == {"held": f"running (pid {holder.pid})", "after_held": "waiting", "free": "done", "gone": "done"}
    assert outcome["elsewhere"] == ["held"] and outcome["waiting"] == ["after_held"]
    last = log.getvalue().splitlines()[-1]  # the four jobs, each counted once
    assert last.endswith("2/4 done] stopped: 2 done, 0 checkpointed, 0 failed, 1 elsewhere, 1 waiting"), last
    assert sorted(outcome["done"]) == ["free", "gone"] and not Path("runs/held/metrics.json").exists()
    assert Path("runs/free/metrics.json").read_text() == "ran here"
    assert Path("runs/gone/metrics.json").read_text() == "ok"  # the other campaign's: not run again
    left = [p.parent.name for p in tmp_path.rglob(".*.campaign-lock")]
    assert left == ["held"]  # the other campaign's, which ended without releasing it (as if killed)


def test_a_gan_stage_s_time_left_is_its_clients_steps_left_at_the_pace_so_far(tmp_path, monkeypatch):
    """A GAN stage's clients take different numbers of steps (their schedules and budgets follow their data's
    size), so its time left is its steps left (each client's budget less what it has done) at its seconds a step;
    another stage of the plan, not started, is estimated at that pace over its own steps."""
    monkeypatch.chdir(tmp_path)
    plan = campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, [TABLE])
    first, second = stages = [j for j in plan["jobs"] if j["kind"] == "stage"]  # seed 0's and seed 1's
    for stage in stages:  # no budget binds (ε0 = ∞): a client of n ≥ 8 samples takes ⌈3n/8⌉ steps (3 epochs at q = 8/n)
        stage["args"]["stage"]["params"] |= {"rounds": 3, "batch_size": 8, "epsilon": math.inf}

    def partition(stage) -> list[int]:
        for job in plan["jobs"]:
            if job["kind"] in ("data", "partition") and job["out"] in stage["needs"]:
                assert campaign.run_job(job, time.time() + 600, 1) == "done"
        clients = json.loads(Path(stage["args"]["partition_file"]).read_text())["clients"]
        return [math.ceil(3 * len(c["train"]) / min(8, len(c["train"]))) for c in clients]

    budget = partition(first)
    work = Path(first["args"]["work_dir"])
    work.mkdir(parents=True)  # client 0 finished at 2 s a step, client 1 stopped after its first step
    settings = dataclasses.asdict(PSGSettings.from_params(first["args"]["stage"]["params"]))
    code = {"code": client_code()}  # written by this PSG code; a finished record also names its settings
    torch.save({"steps": budget[0], "scheduled_steps": budget[0], "epsilon": math.inf, "seconds": 2.0 * budget[0]}
               | code | {"settings": settings}, work / "client0.pt")  # fmt: skip
    torch.save({"step": 1, "budget": budget[1], "seconds": 2.0} | code, work / "client1.state.pt")
    last = len(budget) - 1  # finished under another stage's settings: no progress of this one
    torch.save({"steps": budget[last], "scheduled_steps": budget[last], "epsilon": math.inf, "seconds": 1.0}
               | code | {"settings": settings | {"lr": 1.0}}, work / f"client{last}.pt")  # fmt: skip
    rows = {r["job"]: r for r in campaign.status(plan)}
    row, later = rows[first["label"]], rows[second["label"]]
    steps = f"{budget[0] + 1}/{sum(budget)} steps"
    assert row["progress"] == f"1/{len(budget)} clients, client 1 at step 1/{budget[1]}, {steps}"
    assert (row["state"], row["spent"], row["estimated"]) == ("stopped", 2.0 * (budget[0] + 1), False)
    assert row["left"] == pytest.approx(2.0 * (sum(budget) - budget[0] - 1))
    assert row["summed"] and not any(r["summed"] for r in rows.values() if r["kind"] != "stage")  # clients' seconds
    # the other stage's partition is not written, so its steps are not known: the mean time of the plan's timed stages
    assert (later["state"], later["left"], later["estimated"]) == ("waiting", pytest.approx(2.0 * sum(budget)), True)
    other = partition(second)
    later = next(r for r in campaign.status(plan) if r["job"] == second["label"])
    assert (later["spent"], later["left"], later["estimated"]) == (None, pytest.approx(2.0 * sum(other)), True)

    torch.save({"step": 1, "budget": budget[2], "seconds": 3600.0} | code, work / "client2.state.pt")  # paused an hour
    row = next(r for r in campaign.status(plan) if r["job"] == first["label"])  # the median client's pace: 2 s a step
    assert (row["spent"], row["left"]) == (
        2.0 * (budget[0] + 1) + 3600.0,
        pytest.approx(2.0 * (sum(budget) - budget[0] - 2)),
    )
    # both running clients paused an hour together (a campaign of two threads), then ran 2 steps at 2 s a step: the
    # pace of a kept client is its last stretch's, between its state and the one before it (checkpoint.previous)
    for k in (1, 2):
        checkpoint.save(
            work / f"client{k}.state.pt", {"key": k, "step": 1, "budget": budget[k], "seconds": 3600.0} | code
        )
        checkpoint.save(
            work / f"client{k}.state.pt", {"key": k, "step": 3, "budget": budget[k], "seconds": 3604.0} | code
        )
    row = next(r for r in campaign.status(plan) if r["job"] == first["label"])
    assert (row["spent"], row["left"]) == (
        2.0 * budget[0] + 2 * 3604.0,
        pytest.approx(2.0 * (sum(budget) - budget[0] - 6)),
    )
    # a state before it of another run, or of the same step (a client stopped just after keeping one), times no
    # stretch: the clients' seconds so far over their steps, ≈ 1,201 s a step
    torch.save({"key": "another run", "step": 1, "seconds": 3602.0} | code, work / "client1.state.prev.pt")
    torch.save({"key": 2, "step": 3, "seconds": 3603.0} | code, work / "client2.state.prev.pt")
    row = next(r for r in campaign.status(plan) if r["job"] == first["label"])
    assert row["left"] == pytest.approx(3604.0 / 3 * (sum(budget) - budget[0] - 6))

    clients = [{"steps": b, "seconds": 3.0 * b} for b in budget]  # finished: its record says what it took
    clients[0]["seconds"] += 3600.0  # paused an hour (kill -STOP): in its seconds, not in the stage's pace
    Path(first["out"]).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"clients": clients}, first["out"])
    rows = {r["job"]: r for r in campaign.status(plan)}
    row, later = rows[first["label"]], rows[second["label"]]
    assert (row["state"], row["progress"], row["spent"], row["left"]) == (
        "done", f"{len(budget)} clients, {sum(budget):,} steps", 3.0 * sum(budget) + 3600.0, 0.0)  # fmt: skip
    assert later["left"] == pytest.approx(3.0 * sum(other))  # the median client's pace, 3 s a step


def test_a_stage_of_fl_rounds_out_of_time_checkpoints_and_the_next_call_finishes_it(smoke_run, tmp_path, monkeypatch):
    """FedDPMS' Stage I (P = 2 in the smoke config) past its deadline stops after round 1 with its checkpoint,
    ``--status`` says so, and the next call ends it with the workflow's output (no round lost at a session's end)."""
    workdir, _ = smoke_run
    monkeypatch.chdir(tmp_path)
    plan = campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, ["feddpms_fmnist"])
    stage = next(j for j in plan["jobs"] if j["kind"] == "stage" and j["args"]["stage"]["kind"] == "vae_prelim")
    for job in plan["jobs"]:
        if job["kind"] in ("data", "partition") and job["out"] in stage["needs"]:
            assert campaign.run_job(job, time.time() + 600, 1) == "done"
    assert campaign.run_job(stage, time.time() - 1, 1) == "checkpointed"
    assert not Path(stage["out"]).exists()
    [first] = torch.load(Path(stage["args"]["work_dir"]) / "checkpoint.pt", weights_only=False)["history"]
    row = next(r for r in campaign.status(plan) if r["job"] == stage["label"])
    assert (row["state"], row["progress"][:11], row["left"]) == ("stopped", "round 1/2, ", first["seconds"])
    assert campaign.run_job(stage, time.time() + 600, 1) == "done"
    ours = torch.load(stage["out"], weights_only=False)
    theirs = torch.load(workdir / stage["out"], weights_only=False)
    assert ours["round"] == theirs["round"] == 2 and ours["stage"] == theirs["stage"]
    assert [r["train_loss"] for r in ours["history"]] == [r["train_loss"] for r in theirs["history"]]
    assert all(torch.equal(ours["global_state"][k], v) for k, v in theirs["global_state"].items())


def test_a_stage_killed_while_writing_its_file_leaves_none_to_read_as_done(tmp_path, monkeypatch):
    """A campaign takes an output that exists for done, so a stage writes its file beside it and renames it: one
    stopped halfway through writing leaves no stage file (the next call runs it again); one that ends, a whole one."""
    import fed.runner

    monkeypatch.chdir(tmp_path)
    plan = campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, ["feddpms_fmnist"])
    stage = next(j for j in plan["jobs"] if j["kind"] == "stage")

    def writes(content: bytes, then: type[BaseException] | None = None):
        def run_stage(*args, **kwargs):
            out = Path(args[6])  # run_stage's out
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(content)
            if then:
                raise then

        return run_stage

    monkeypatch.setattr(fed.runner, "run_stage", writes(b"half a stage", KeyboardInterrupt))  # the kill, mid-write
    with pytest.raises(KeyboardInterrupt):
        campaign.run_job(stage, time.time() + 600, 1)
    assert not Path(stage["out"]).exists()
    monkeypatch.setattr(fed.runner, "run_stage", writes(b"a whole stage"))
    assert campaign.run_job(stage, time.time() + 600, 1) == "done"
    assert Path(stage["out"]).read_bytes() == b"a whole stage"
    assert [p.name for p in Path(stage["out"]).parent.iterdir() if p.name.endswith(".part")] == []


def test_a_tuning_s_progress_is_its_points_rounds(tmp_path, monkeypatch):
    """A tuning stage's time left: the rounds its grid points have left (a point's work dir holds its checkpoint) at
    the pace of the rounds run."""
    overlay = tmp_path / "tuned.yaml"
    overlay.write_text(
        "methods:\n  qffl: {tune: {grid: {q: [0.0, 0.1, 1.0]}, rounds: 4, per_seed: true}}\nreference_dir: null\n"
    )
    plan = campaign.plan([[str(REPO / "config/fmnist.yaml"), str(overlay)]], REPO, methods=["qffl"])
    tuning = next(j for j in plan["jobs"] if j["kind"] == "stage" and j["args"]["stage"]["kind"] == "tuning")
    monkeypatch.chdir(tmp_path)
    work = Path(tuning["args"]["work_dir"])
    for point, rounds in (("q0.0", 4), ("q0.1", 1)):  # one point finished, one stopped after its first round
        (work / point).mkdir(parents=True)
        history = [{"seconds": 10.0 + r} for r in range(rounds)]
        torch.save({"round": rounds, "history": history, "wall_seconds": sum(h["seconds"] for h in history)},
                   work / point / "checkpoint.pt")  # fmt: skip
    row = next(r for r in campaign.status(plan) if r["job"] == tuning["label"])
    assert (row["state"], row["progress"], row["spent"]) == ("stopped", "5/12 rounds of 3 runs", 56.0)
    assert row["left"] == 11.0 * 7 and not row["estimated"]  # 7 rounds at the median round (10, 11, 12, 13, 10)


def test_a_paused_round_does_not_set_a_cell_s_pace(tmp_path, monkeypatch):
    """A campaign stopped with ``kill -STOP`` for an hour stretches one round's wall time, not the pace: a
    cell's time left is its rounds left at its median round; a finished cell of the algorithm paces the ones not
    started."""
    monkeypatch.chdir(tmp_path)
    plan = campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, [TABLE])
    args = next(j for j in plan["jobs"] if j["label"] == "smoke_dafl/synthetic/1-label/fedavg/seed0")["args"]
    args = args | {"preset": args["preset"] | {"rounds": 10}}
    jobs = [{"kind": "cell", "out": f"runs/{name}/metrics.json", "rank": [0, 0, 1], "needs": [], "label": name,
             "args": args | {"work_dir": f"work/{name}"}} for name in ("stopped", "done", "later")]  # fmt: skip
    Path("work/stopped").mkdir(parents=True)
    seconds = [10.0, 12.0, 3600.0, 11.0]  # round 3 paused for an hour
    history = [{"seconds": t, "global_acc": 50.0} for t in seconds]
    torch.save({"round": 4, "history": history, "wall_seconds": 3650.0}, "work/stopped/checkpoint.pt")
    Path("runs/done").mkdir(parents=True)
    record = {"diverged": False, "rounds_completed": 3, "last": {"global_acc": 60.0}, "wall_seconds": 7220.0,
              "history": [{"seconds": 20.0}, {"seconds": 7180.0}, {"seconds": 20.0}]}  # fmt: skip
    Path("runs/done/metrics.json").write_text(json.dumps(record))
    rows = {r["job"]: r for r in campaign.status({"version": campaign.PLAN_VERSION, "jobs": jobs})}
    assert (rows["stopped"]["spent"], rows["stopped"]["left"]) == (3650.0, 11.5 * 6)  # median of 10, 11, 12, 3600
    assert (rows["done"]["spent"], rows["done"]["left"]) == (7220.0, 0.0)
    # the kind's pace: 11.5 s over 4 rounds and 20 s over 3, weighted by rounds, times the 10 rounds to run
    assert rows["later"]["left"] == pytest.approx((11.5 * 4 + 20.0 * 3) / 7 * 10) and rows["later"]["estimated"]


def median_round(record: dict) -> float:
    seconds = sorted(r["seconds"] for r in record["history"])
    return (seconds[(len(seconds) - 1) // 2] + seconds[len(seconds) // 2]) / 2


def test_cells_with_no_pace_in_the_plan_take_their_algorithm_s_finished_cells_on_this_kind_of_machine(
    tmp_path, monkeypatch
):
    """Where none of an algorithm's cells in the plan has run a round (a seed study's cells waiting on their GAN
    stages), the cells the plan skipped as finished pace them, those of this kind of machine only: another kernel set
    or a GPU runs at another pace; with a pace of their own in the plan, the plan's jobs pace them."""
    monkeypatch.chdir(tmp_path)
    here = kind({"machine": machine(resolve_device("auto"))})  # this machine, as a cell run here records it
    elsewhere = "cuda NVIDIA H200" if here.startswith("cpu") else "cpu AVX2"
    preset = dataclasses.asdict(FLConfig(rounds=10))
    args = {"preset": preset, "dataset": "synthetic", "tracking": {"tags": {"algorithm": "dafl"}}}
    jobs = [{"kind": "cell", "out": f"runs/{name}/metrics.json", "rank": [0, 0, 1], "needs": [], "label": name,
             "args": args | {"work_dir": f"work/{name}"}} for name in ("later", "stopped")]  # fmt: skip
    paces = {"dafl": [{"cell": "a", "pace": 20.0, "rounds": 3, "machine": here},
                      {"cell": "b", "pace": 50.0, "rounds": 5, "machine": here},
                      {"cell": "c", "pace": 2.0, "rounds": 50, "machine": elsewhere}],
             "fedavg": [{"cell": "d", "pace": 1.0, "rounds": 50, "machine": here}]}  # fmt: skip
    plan = {"version": campaign.PLAN_VERSION, "jobs": jobs, "paces": paces}
    rows = {r["job"]: r for r in campaign.status(plan)}
    assert rows["later"]["left"] == pytest.approx((20.0 * 3 + 50.0 * 5) / 8 * 10) and rows["later"]["estimated"]
    Path("work/stopped").mkdir(parents=True)
    history = [{"seconds": t, "global_acc": 50.0} for t in (30.0, 40.0)]
    torch.save({"round": 2, "history": history, "wall_seconds": 70.0}, "work/stopped/checkpoint.pt")
    rows = {r["job"]: r for r in campaign.status(plan)}
    assert rows["stopped"]["left"] == 35.0 * 8 and rows["later"]["left"] == pytest.approx(35.0 * 10)
    moved = {"dafl": [p | {"machine": elsewhere} for p in paces["dafl"]]}
    rows = {r["job"]: r for r in campaign.status(plan | {"jobs": jobs[:1], "paces": moved})}
    assert rows["later"]["left"] is None and not rows["later"]["estimated"]


def test_with_none_of_its_own_tables_cells_run_here_a_plan_paces_an_algorithm_by_the_config_s_other_cells(
    tmp_path, monkeypatch
):
    """A plan of one table carries the paces of the config's other finished cells of the algorithms it runs, marked
    as not its own (DA-FL's Dir(0.05) seeds, whose seed 0 ran on another CPU, paced by its 1- and 2-Label cells run
    here); status takes them only where none of the plan's own finished cells of the algorithm ran on this kind of
    machine."""
    from fed.grid import Grid

    monkeypatch.chdir(tmp_path)
    here = kind({"machine": machine(resolve_device("auto"))})
    elsewhere = "cuda NVIDIA H200" if here.startswith("cpu") else "cpu AVX2"
    grid = Grid.from_files([str(REPO / "config/smoke.yaml")], REPO)
    other = ("smoke", "synthetic", "dir0.5", "fedavg", 0)  # the baselines table's FedAvg, outside TABLE
    out = Path(grid.cell_path(*other))
    out.parent.mkdir(parents=True)
    record = {"rounds_completed": 3, "machine": machine(resolve_device("auto")),
              "history": [{"seconds": t} for t in (4.0, 6.0, 5.0)]}  # fmt: skip
    out.write_text(json.dumps(record))
    plan = campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, [TABLE])
    assert plan["paces"] == {"fedavg": [{"cell": str(out), "pace": 5.0, "rounds": 3, "machine": here,
                                         "planned": False}]}  # fmt: skip
    assert campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, [TABLE], methods=["dafl_gamma0.01"])["paces"] == {}

    own = [{"cell": "a", "pace": 20.0, "rounds": 3, "machine": here}, {"cell": "b", "pace": 2.0, "rounds": 50,
            "machine": elsewhere}]  # fmt: skip
    others = [{"cell": "c", "pace": 50.0, "rounds": 5, "machine": here, "planned": False},
              {"cell": "d", "pace": 1.0, "rounds": 5, "machine": elsewhere, "planned": False}]  # fmt: skip
    assert campaign._finished_paces({"dafl": own + others}) == {("cell", "dafl"): [(60.0, 3)]}
    assert campaign._finished_paces({"dafl": own[1:] + others}) == {("cell", "dafl"): [(250.0, 5)]}
    assert campaign._finished_paces({"dafl": own[1:] + others[1:]}) == {}


def test_a_gan_stage_not_started_is_paced_by_the_config_s_finished_stages_clients_on_this_kind_of_machine(
    tmp_path, monkeypatch
):
    """Before any of its clients has taken a step, a GAN stage's time left is its steps at the seconds a step of the
    config's finished GAN stages, of their clients that ran on this kind of machine (each client's record names
    its machine; one that names none, trained before they did, paces nothing); the plan carries those paces."""
    monkeypatch.chdir(tmp_path)
    here = machine(resolve_device("auto"))
    elsewhere = {"gpu": "NVIDIA H200"} if kind({"machine": here}).startswith("cpu") else {"cpu_capability": "AVX2"}
    first, second = [j for j in campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, [TABLE])["jobs"]
                     if j["kind"] == "stage"]  # fmt: skip
    clients = [{"steps": 10, "seconds": 30.0, "machine": here}, {"steps": 20, "seconds": 100.0, "machine": here},
               {"steps": 40, "seconds": 60.0, "machine": here}, {"steps": 5, "seconds": 1.0, "machine": elsewhere},
               {"steps": 7, "seconds": 70.0}, {"steps": 0, "seconds": 0.0, "machine": here}]  # fmt: skip
    Path(first["out"]).parent.mkdir(parents=True)
    torch.save({"clients": clients}, first["out"])  # seed 0's stage finished
    plan = campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, [TABLE])
    assert plan["stage_paces"] == {"dp_cgan": [
        {"stage": first["out"], "pace": 3.0, "steps": 70, "machine": kind({"machine": here})},  # median of 3, 5, 1.5
        {"stage": first["out"], "pace": 0.2, "steps": 5, "machine": kind({"machine": elsewhere})},
        {"stage": first["out"], "pace": 10.0, "steps": 7, "machine": "not recorded"}]}  # fmt: skip
    for job in plan["jobs"]:  # seed 1's partition: its clients' steps are known
        if job["kind"] in ("data", "partition") and job["out"] in second["needs"]:
            assert campaign.run_job(job, time.time() + 600, 1) == "done"
    sizes = [len(c["train"]) for c in json.loads(Path(second["args"]["partition_file"]).read_text())["clients"]]
    steps = sum(PSGSettings.from_params(second["args"]["stage"]["params"]).steps(n)[3] for n in sizes)
    row = next(r for r in campaign.status(plan) if r["job"] == second["label"])
    assert (row["state"], row["spent"], row["estimated"]) == ("ready", None, True)
    assert row["left"] == pytest.approx(3.0 * steps)
    moved = {"dp_cgan": [p for p in plan["stage_paces"]["dp_cgan"] if p["pace"] != 3.0]}  # none ran here
    row = next(r for r in campaign.status(plan | {"stage_paces": moved}) if r["job"] == second["label"])
    assert row["left"] is None and not row["estimated"]


def test_a_stage_of_fl_rounds_not_started_is_paced_by_the_config_s_finished_stages_of_its_kind_on_this_machine(
    tmp_path, monkeypatch
):
    """FedDPMS' Stage I (its file is its run's last checkpoint): before its first round, its rounds at the median
    round of the config's finished Stage I stages whose rounds ran on this kind of machine (the checkpoint's
    ``machines``: one resumed across kinds is both, and paces nothing); a file without rounds paces nothing."""
    monkeypatch.chdir(tmp_path)
    here = machine(resolve_device("auto"))
    elsewhere = {"gpu": "NVIDIA H200"} if kind({"machine": here}).startswith("cpu") else {"cpu_capability": "AVX2"}
    first, second = [j for j in campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, ["feddpms_fmnist"])["jobs"]
                     if j["kind"] == "stage"]  # fmt: skip
    rounds = first["args"]["stage"]["params"]["rounds"]
    assert rounds == second["args"]["stage"]["params"]["rounds"] == 2  # the smoke config's P

    def finished(history, machines):
        Path(first["out"]).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"round": len(history), "history": [{"seconds": t} for t in history], "machines": machines},
                   first["out"])  # fmt: skip
        plan = campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, ["feddpms_fmnist"])
        return plan, next(r for r in campaign.status(plan) if r["job"] == second["label"])

    plan, row = finished([9.0, 5.0, 7.0], [elsewhere, here])  # resumed here after rounds elsewhere
    assert plan["stage_paces"] == {"vae_prelim": [
        {"stage": first["out"], "pace": 7.0, "rounds": 3, "machine": kind({"machine": here | {"earlier": [elsewhere]}})}
    ]}  # fmt: skip
    assert "+" in plan["stage_paces"]["vae_prelim"][0]["machine"]  # both kinds: paces nothing here
    assert row["left"] is None and not row["estimated"]
    plan, row = finished([9.0, 5.0, 7.0], [here])
    assert plan["stage_paces"]["vae_prelim"][0]["machine"] == kind({"machine": here})
    assert (row["spent"], row["left"], row["estimated"]) == (None, 7.0 * rounds, True)
    plan, row = finished([4.0], [elsewhere])
    assert row["left"] is None and not row["estimated"]
    torch.save({"state": {}, "round": 2}, first["out"])  # a model, not a run's checkpoint
    assert campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, ["feddpms_fmnist"])["stage_paces"] == {}
    paces = [{"stage": s, "pace": t, "rounds": n, "machine": kind({"machine": here})} for s, t, n in
             [("a", 2.0, 3), ("b", 10.0, 1)]]  # fmt: skip
    assert campaign._finished_paces({}, {"vae_prelim": paces}) == {("stage", "vae_prelim"): [(6.0, 3), (10.0, 1)]}


def test_a_cell_not_started_has_only_the_rounds_after_the_stage_it_warm_starts_from_left(tmp_path, monkeypatch):
    """A FedDPMS cell continues from its Stage I's last checkpoint, at round P (``Engine.load_warm_start``): before it
    starts, its time left is its rounds after P at its kind's pace (the P rounds are the stage's, in the stage's own
    row), whether the plan runs the stage or the stage is done and not planned (its file says its round)."""
    monkeypatch.chdir(tmp_path)
    here = kind({"machine": machine(resolve_device("auto"))})
    plan = campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, ["feddpms_fmnist"])
    cell = next(j for j in plan["jobs"] if j["kind"] == "cell" and j["args"].get("stages", {}).get("warm"))
    stage = next(j for j in plan["jobs"] if j["out"] == cell["args"]["stages"]["warm"])
    prelim, rounds = stage["args"]["stage"]["params"]["rounds"], cell["args"]["preset"]["rounds"]
    assert (prelim, rounds) == (2, 3)  # the smoke config's P and rounds
    paces = {"feddpms": [{"cell": "a", "pace": 10.0, "rounds": 3, "machine": here}]}

    def left(jobs):
        row = next(r for r in campaign.status(plan | {"jobs": jobs, "paces": paces}) if r["job"] == cell["label"])
        assert row["estimated"]
        return row["left"]

    assert left(plan["jobs"]) == 10.0 * (rounds - prelim)
    Path(stage["out"]).parent.mkdir(parents=True)
    torch.save({"round": prelim, "history": [{"seconds": 5.0}] * prelim}, stage["out"])  # done: a new plan skips it
    assert left([j for j in plan["jobs"] if j is not stage]) == 10.0 * (rounds - prelim)
    cell["args"]["stages"] = {}  # no warm start: every round its own
    assert left(plan["jobs"]) == 10.0 * rounds


def test_an_algorithm_that_never_ran_here_is_paced_by_another_s_pace_here_scaled_by_their_ratio_elsewhere(
    tmp_path, monkeypatch
):
    """FedProx's cells on a CPU where no FedProx cell ran: FedAvg's pace here (the plan's running cell's before its
    finished cells') times FedProx's over FedAvg's seconds a round, weighted by rounds, on the machine where both ran
    the most rounds; said under the table. An algorithm with no such pair still has no estimate."""
    monkeypatch.chdir(tmp_path)
    here = kind({"machine": machine(resolve_device("auto"))})
    gpu, cpu = ("cuda NVIDIA H200", "cpu AVX2") if here.startswith("cpu") else ("cpu AVX2", "cpu SSE4")

    def job(name, algorithm):
        args = {"preset": dataclasses.asdict(FLConfig(rounds=10)), "dataset": "synthetic", "work_dir": f"work/{name}",
                "tracking": {"tags": {"algorithm": algorithm}}}  # fmt: skip
        return {"kind": "cell", "out": f"runs/{name}/metrics.json", "rank": [0, 0, 1], "needs": [], "label": name,
                "args": args}  # fmt: skip

    def pace(seconds, rounds, where):
        return {"cell": f"{where}/{seconds}", "pace": seconds, "rounds": rounds, "machine": where}

    paces = {
        "fedavg": [pace(300.0, 10, here), pace(400.0, 30, here), pace(11.0, 50, gpu), pace(9.0, 50, gpu),
                   pace(50.0, 10, cpu)],
        "fedprox": [pace(14.0, 30, gpu), pace(12.0, 70, gpu), pace(100.0, 120, cpu)],  # 12.6 a round on the H200
        "fedmix": [pace(5.0, 10, cpu)],
    }  # fmt: skip
    plan = {"version": campaign.PLAN_VERSION, "paces": paces,
            "jobs": [job("prox", "fedprox"), job("mix", "fedmix"), job("nova", "fednova")]}  # fmt: skip
    rows = {r["job"]: r for r in campaign.status(plan)}
    ratio = 12.6 / 10.0  # on the H200 (200 rounds of both), not the AVX2 CPU (130: ratio 2)
    assert rows["prox"]["left"] == pytest.approx(375.0 * ratio * 10) and rows["prox"]["estimated"]
    assert rows["prox"]["scaled"] == f"fedprox: at fedavg's pace here × 1.26 (fedprox's over fedavg's on {gpu})"
    assert rows["mix"]["left"] == pytest.approx(375.0 * 5.0 / 50.0 * 10)  # its only pair: the AVX2 CPU
    assert rows["nova"]["left"] is None and not rows["nova"]["estimated"]  # never ran anywhere
    lines = campaign.describe(list(rows.values())).splitlines()
    assert lines[-3].endswith("(≈: at their kind's pace, or as said below), and 1 job with no estimate")
    assert lines[-2:] == [f"≈ {rows['prox']['scaled']}", f"≈ {rows['mix']['scaled']}"]
    assert rows["mix"]["scaled"].startswith("fedmix: at fedavg's pace here × 0.10 (")

    Path("work/avg").mkdir(parents=True)  # the plan's own FedAvg cell, stopped: its pace before the finished cells'
    history = [{"seconds": t, "global_acc": 50.0} for t in (180.0, 200.0, 220.0)]
    torch.save({"round": 3, "history": history, "wall_seconds": 600.0}, "work/avg/checkpoint.pt")
    rows = {r["job"]: r for r in campaign.status(plan | {"jobs": [job("avg", "fedavg"), job("prox", "fedprox")]})}
    assert rows["prox"]["left"] == pytest.approx(200.0 * ratio * 10)
    moved = {alg: [p | {"machine": here} for p in ps] if alg == "fedprox" else ps for alg, ps in paces.items()}
    rows = {r["job"]: r for r in campaign.status(plan | {"paces": moved})}  # FedProx ran here: its own pace
    assert rows["prox"]["left"] == pytest.approx((14.0 * 30 + 12.0 * 70 + 100.0 * 120) / 220 * 10)
    assert "scaled" not in rows["prox"]


def test_a_running_cell_s_status_counts_its_rounds_past_the_checkpoint_and_a_stopped_one_only_the_checkpoint(
    synthetic_root, tmp_path, monkeypatch
):
    """A paper-scale round can take minutes and checkpoints come every few rounds: while a campaign runs a cell,
    status reads the rounds the engine writes after every round (``rounds.json``) and says where its checkpoint is;
    killed, the cell resumes from that checkpoint, so that is all status counts; resumed, the rounds it will run
    again are not shown as done."""
    from fed.algorithms import build_algorithm
    from fed.data.datasets import load_dataset, load_labels
    from fed.data.partition import make_partition
    from fed.engine import ROUNDS_FILE, Engine

    part = make_partition(load_labels("synthetic", synthetic_root), "unimodal", 10, seed=0)
    settings = dict(num_clients=10, fraction=0.3, local_epochs=1, batch_size=20, eval_every=1, checkpoint_every=3)
    cfg = FLConfig(rounds=5, **settings)
    monkeypatch.chdir(tmp_path)
    job = {"kind": "cell", "out": "runs/c/metrics.json", "rank": [0, 0, 1], "needs": [], "label": "c",
           "args": {"work_dir": "work/c", "preset": dataclasses.asdict(cfg), "dataset": "synthetic"}}  # fmt: skip
    plan = {"version": campaign.PLAN_VERSION, "jobs": [job]}
    seen = {}

    def on_round(row):  # the status a reader gets after each round; the run is killed in round 4, after its file
        seen[row["round"]] = campaign.status(plan)[0]
        if row["round"] == 4:
            raise KeyboardInterrupt

    def engine(**hooks):
        data = (load_dataset("synthetic", synthetic_root, s) for s in ("train", "test"))
        return Engine(cfg, build_algorithm("fedavg"), *data, part, 0, work_dir="work/c", progress=None, **hooks)

    monkeypatch.setattr(campaign, "_holder", lambda out: os.getpid())  # a campaign (this process) holds the cell
    with pytest.raises(KeyboardInterrupt):
        engine(on_round=on_round).run()
    rounds = json.loads(Path("work/c", ROUNDS_FILE).read_text())
    acc, seconds = rounds["history"][-1]["global_acc"], sorted(r["seconds"] for r in rounds["history"])
    assert seen[2]["progress"].endswith("% there (no checkpoint yet)") and seen[3]["progress"].startswith("round 3/5")
    assert (seen[4]["state"], seen[4]["progress"]) == (
        f"running (pid {os.getpid()})",
        f"round 4/5, {acc:.2f} % there (checkpoint: round 3)",
    )
    assert (seen[4]["spent"], seen[4]["left"]) == (rounds["wall_seconds"], (seconds[1] + seconds[2]) / 2)  # 1 left
    monkeypatch.setattr(campaign, "_holder", lambda out: None)  # the campaign is gone
    [stopped] = campaign.status(plan)
    assert (stopped["state"], stopped["progress"].split(",")[0]) == ("stopped", "round 3/5")
    monkeypatch.setattr(campaign, "_holder", lambda out: os.getpid())

    def on_start(fingerprint, resumed):  # resumed from round 3: round 4 is to run again
        seen["start"] = campaign.status(plan)[0]

    engine(on_start=on_start).run()
    assert seen["start"]["progress"].split(",")[0] == "round 3/5" and "checkpoint" not in seen["start"]["progress"]
    assert json.loads(Path("work/c", ROUNDS_FILE).read_text())["round"] == 5


def test_status_says_where_a_cell_diverged(tmp_path, monkeypatch):
    """A diverged cell is done (its record says so, as the workflow's): its row says the round, not an accuracy."""
    monkeypatch.chdir(tmp_path)
    out = Path("runs/x/metrics.json")
    out.parent.mkdir(parents=True)
    record = {"diverged": True, "diverged_round": 3, "rounds_completed": 3, "last": {"global_acc": None},
              "wall_seconds": 356.0}  # fmt: skip
    out.write_text(json.dumps(record))
    job = {"kind": "cell", "out": str(out), "rank": [0, 0, 1], "needs": [], "label": "x", "args": {}}
    [row] = campaign.status({"version": campaign.PLAN_VERSION, "jobs": [job]})
    assert (row["state"], row["progress"], row["spent"], row["left"]) == ("done", "diverged in round 3", 356.0, 0.0)


def test_status_reads_a_gpu_s_checkpoints_and_gan_stages_without_cuda(tmp_path, monkeypatch):
    """A lent GPU's files come back to the CPU box (scripts/device_campaign.sh) with their tensors tagged cuda:0:
    ``fed campaign --status`` reads a cell's checkpoint and a finished GAN stage from them on a machine without CUDA,
    and never initialises CUDA on one with it (a status read beside a running campaign takes no GPU memory)."""
    monkeypatch.chdir(tmp_path)
    history = [{"round": r, "global_acc": 50.0 + r, "seconds": 10.0 + r} for r in (1, 2, 3)]
    Path("work/c").mkdir(parents=True)
    with monkeypatch.context() as gpu:  # torch.save as on a GPU: every storage's location is cuda:0
        gpu.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        checkpoint.save(
            Path("work/c/checkpoint.pt"),
            {"round": 3, "global_state": {"w": torch.ones(3)}, "history": history, "wall_seconds": 36.0},
        )
        torch.save({"clients": [{"steps": 4, "seconds": 8.0, "generator": {"w": torch.zeros(2)}}]}, "stage.pt")
    if not torch.cuda.is_available():  # the files need CUDA unless they are mapped to the CPU
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load("work/c/checkpoint.pt", weights_only=False)

    def no_cuda(*args, **kwargs):
        raise AssertionError("status initialised CUDA")

    monkeypatch.setattr(torch.cuda, "_lazy_init", no_cuda)
    monkeypatch.setattr(torch.cuda, "init", no_cuda)
    cfg = dataclasses.asdict(FLConfig(rounds=5))
    jobs = [{"kind": "cell", "out": "runs/c/metrics.json", "rank": [0, 0, 1], "needs": [], "label": "c",
             "args": {"work_dir": "work/c", "preset": cfg, "dataset": "synthetic"}},
            {"kind": "stage", "out": "stage.pt", "rank": [0, 0, 0], "needs": [], "label": "s",
             "args": {"stage": {"kind": "dp_cgan", "params": {}}}}]  # fmt: skip
    cell, stage = campaign.status({"version": campaign.PLAN_VERSION, "jobs": jobs})
    assert (cell["state"], cell["progress"], cell["spent"], cell["left"]) == ("stopped", "round 3/5, 53.00 % there",
                                                                              36.0, 2 * 12.0)  # fmt: skip
    assert (stage["state"], stage["progress"], stage["spent"], stage["left"]) == ("done", "1 clients, 4 steps",
                                                                                  8.0, 0.0)  # fmt: skip


def test_status_says_the_hours_spent_and_left_and_which_are_estimated_from_other_jobs():
    rows = [
        {"job": "a/cell", "kind": "cell", "state": "stopped", "progress": "round 10/50", "spent": 1800.0,
         "left": 7200.0},
        {"job": "a/stage", "kind": "stage", "state": "running (pid 7)", "progress": "2/10 clients", "spent": 5400.0,
         "left": 10800.0, "summed": True},
        {"job": "b/cell", "kind": "cell", "state": "waiting", "progress": "", "spent": None, "left": 9000.0,
         "estimated": True},
        {"job": "b/data", "kind": "data", "state": "ready", "progress": "", "spent": None, "left": None},
        {"job": "c/cell", "kind": "cell", "state": "done", "progress": "round 50", "spent": 9000.0, "left": 0.0},
    ]  # fmt: skip
    rows = [{"estimated": False} | r for r in rows]
    lines = campaign.describe(rows).splitlines()
    assert lines[0].split() == ["job", "state", "progress", "spent", "left"]
    assert lines[1].split() == ["a/cell", "stopped", "round", "10/50", "0.5", "h", "2.0", "h"]
    assert lines[3].split() == ["b/cell", "waiting", "–", "≈", "2.5", "h"]
    last = (
        "1 stopped, 1 running, 1 waiting, 1 ready, 1 done; ≈ 5.0 h left at the pace so far, ≈ 2.5 h for 1 job "
        "without a pace (≈: at their kind's pace), and 1 job with no estimate"
    )
    assert lines[-2:] == [last, campaign.GAN_HOURS]
    assert campaign.describe(rows[:1] + rows[2:]).splitlines()[-1].startswith("1 stopped, 1 waiting")  # no stage
    assert campaign.describe(rows[3:]).splitlines()[-1] == "1 ready, 1 done; 1 job with no estimate"  # not "0.0 h"
    assert campaign.describe(rows[4:]).splitlines()[-1] == "1 done; nothing left"


LINGER = """
import os, signal, time
from pathlib import Path

def linger(job, stop_at, threads):
    Path(job["out"] + ".pid").write_text(str(os.getpid()))
    time.sleep(120)
    return "done"

def _terminate(signum, frame):
    Path("cell.terminated").write_text(str(os.getppid()))
    raise SystemExit(f"terminated by signal {signum}")

def linger_as_a_cell(job, stop_at, threads):  # SIGTERM handled as fed.runner handles it in a cell
    signal.signal(signal.SIGTERM, _terminate)
    return linger(job, stop_at, threads)
"""


def state(pid: int) -> str | None:
    """The process' state letter in /proc (Z: a zombie), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def running(pid: int) -> bool:
    """Alive and not a zombie (a dead orphan stays one where the container's init does not reap it)."""
    return state(pid) not in ("Z", None)


def until(condition: Callable[[], bool], seconds: float) -> bool:
    """Whether condition() came to hold within seconds (looked at every 0.1 s)."""
    for _ in range(round(seconds * 10)):
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@contextlib.contextmanager
def lingering_campaign(tmp_path: Path, work: str, prelude: str = ""):
    """A campaign of one lingering job in a process of its own (``prelude`` first): (process, its worker's pid),
    both killed afterwards."""
    (tmp_path / "lingering.py").write_text(LINGER)
    script = (
        "import sys; sys.path[:0] = sys.argv[1:3]; from fed import campaign; import lingering\n"
        f"{prelude}\n"
        "job = {'kind': 'cell', 'out': 'cell', 'rank': [0, 0, 1], 'needs': [], 'label': 'cell', 'args': {}}\n"
        f"campaign.run({{'version': campaign.PLAN_VERSION, 'jobs': [job]}}, minutes=5, work=lingering.{work})"
    )
    pid_file = tmp_path / "cell.pid"
    parent = subprocess.Popen([sys.executable, "-c", script, str(REPO / "src"), str(tmp_path)], cwd=tmp_path)
    try:  # the worker starts (spawned: it imports fed afresh)
        assert until(lambda: pid_file.exists() and pid_file.read_text() != "", 60)
        yield parent, int(pid_file.read_text())
    finally:
        parent.kill()
        if pid_file.exists() and running(worker := int(pid_file.read_text())):
            os.kill(worker, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("work", ["linger", "linger_as_a_cell"])
@pytest.mark.parametrize("kill", ["SIGKILL", "SIGTERM"])
def test_a_killed_campaign_takes_its_workers_with_it(tmp_path, work, kill):
    """kill -9 (or kill) of a campaign leaves no worker training on: its lock died with the campaign, so the next
    campaign would start the same cell beside it; nor waiting for work: a cell turns the SIGTERM into SystemExit,
    which the pool would take for the job's outcome."""
    with lingering_campaign(tmp_path, work) as (parent, worker):
        assert running(worker)
        parent.send_signal(getattr(signal, kill))
        parent.wait()
        assert until(lambda: not running(worker), 10), "the worker outlived its campaign"
        if work == "linger_as_a_cell":
            assert (tmp_path / "cell.terminated").exists(), "the cell did not end as a terminated job"


SYS_EXIT = {"x86_64": 60, "aarch64": 93}  # exit(2) of the calling thread only, where exit_group(2) ends them all


@pytest.mark.skipif(os.uname().machine not in SYS_EXIT or sys.platform != "linux", reason="Linux's thread exit")
def test_a_campaign_dying_thread_by_thread_ends_its_cell_once_it_has_gone(tmp_path):
    """A killed campaign's threads exit one by one, and its workers must wait for the last: while a thread lives,
    the campaign is still the worker's parent, and a cell ended then could not tell whether to end its worker too
    (the parent-death signal fired there: the cell ended, its worker waited for work from a dead pool; failed
    CI once, and 1 run in 12 of the kill tests on a 2-core Xeon). Here the campaign's main thread, the one that
    started the worker, exits first and another lingers."""
    prelude = (
        "import ctypes, os, signal, threading, time; from pathlib import Path\n"
        f"signal.signal(signal.SIGUSR1, lambda *_: ctypes.CDLL(None).syscall({SYS_EXIT[os.uname().machine]}, 0))\n"
        "def last_thread():\n"
        "    while not Path('die').exists(): time.sleep(0.05)\n"
        "    os._exit(0)\n"
        "threading.Thread(target=last_thread).start()"
    )
    with lingering_campaign(tmp_path, "linger_as_a_cell", prelude) as (parent, worker):
        parent.send_signal(signal.SIGUSR1)  # its main thread exits
        assert until(lambda: state(parent.pid) == "Z", 5)  # its leader waits, a zombie, for the rest
        time.sleep(2 * campaign.WATCH_EVERY + 0.5)
        assert parent.poll() is None and running(worker)
        assert not (tmp_path / "cell.terminated").exists(), "the cell ended while its campaign lived"
        (tmp_path / "die").touch()  # the last thread exits: the campaign has gone
        parent.wait()
        assert until(lambda: not running(worker), 10), "the worker outlived its campaign"
        assert (tmp_path / "cell.terminated").read_text() != str(parent.pid), "the cell ended before its campaign had"


def test_a_tuning_after_another_waits_for_that_tuning_in_the_plan(tmp_path):
    """tune.after: the campaign runs FedAvg's lr tuning first and hands its file to the tuning that starts from it."""
    overlay = tmp_path / "tuned.yaml"
    overlay.write_text(
        "methods:\n"
        "  fedavg_t: {algorithm: fedavg, tune: {grid: {protocol.lr: [0.01, 0.02]}, per_seed: true}}\n"
        "  qffl: {tune: {grid: {q: [0.0, 0.1]}, after: fedavg_t, per_seed: true}}\n"
        "reference_dir: null\n"
    )
    plan = campaign.plan([[str(REPO / "config/fmnist.yaml"), str(overlay)]], REPO, methods=["qffl"])
    jobs = {job["out"]: job for job in plan["jobs"]}
    stages = "results/stages/fedzda/fmnist/unimodal/seed1"
    first, then = f"{stages}/tuning-methodfedavg_t-per_seedTrue.pt", f"{stages}/tuning-methodqffl-per_seedTrue.pt"
    assert first in jobs[then]["needs"] and jobs[then]["args"]["after"] == first
    assert jobs[first]["args"]["after"] is None
    order = [job["out"] for job in plan["jobs"]]
    assert order.index(first) < order.index(then)


def test_the_device_script_runs_a_plan_without_snakemake_or_mlflow_and_brings_the_cells_back(tmp_path):
    """scripts/device_campaign.sh, as a lent GPU machine runs it (PyTorch, no Snakemake, no MLflow): the plan's
    cells finish, and $OUT/runs.tgz holds their metrics, histories and jobs' costs (never weights) for fed
    export-reference."""
    import tarfile

    work = tmp_path / "checkout"
    (work / "scripts").mkdir(parents=True)
    for script in ("device_campaign.sh", "device_env.sh"):
        (work / "scripts" / script).write_bytes((REPO / "scripts" / script).read_bytes())
    (work / "src").symlink_to(REPO / "src")
    (work / "config.yaml").symlink_to(REPO / "config.yaml")
    campaign.write_plan(campaign.plan([[str(REPO / "config/smoke.yaml")]], REPO, [TABLE], ["fedavg"]), work / "p.json")
    planted = {  # unfinished work a cut-off call leaves: a cell's checkpoint, a finished stage, a stage's client
        "results/work/p/d/1-label/m/seed0/checkpoint.pt": b"c" * 10,
        "results/work/p/d/1-label/m/seed0/clients/3/r2.pt": b"s" * 10,
        "results/stages/p/d/1-label/seed0/dp_cgan-epsilon50.0-ab12.pt": b"g" * 10,
        "results/work/stages/p/d/1-label/seed0/dp_cgan-epsilon50.0-ab12/client0.pt": b"k" * 10,  # its stage is done
        "results/work/stages/p/d/2-label/seed0/dp_cgan-epsilon50.0-ab12/client1.pt": b"k" * 10,
        "results/work/stages/p/d/2-label/seed0/dp_cgan-epsilon50.0-ab12/client2.request.pt": b"r" * 10,
    }
    for name, data in planted.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    out = tmp_path / "out"
    env = without(tmp_path, "snakemake", "mlflow") | {
        "OUT": str(out),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    env["PYTHONPATH"] = env["PYTHONPATH"].split(os.pathsep)[0]  # the script puts its checkout's src/ first
    proc = subprocess.run(["bash", "scripts/device_campaign.sh", "p.json", "5", "1", "1"], cwd=work, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "device_campaign: 2 finished cells" in proc.stdout and (out / "campaign.log").exists()
    with tarfile.open(out / "runs.tgz") as tar:
        names = sorted(tar.getnames())
    runs = "results/runs/smoke_dafl/synthetic/1-label/fedavg"
    assert [n for n in names if n.startswith("results/")] == [
        f"{runs}/seed{s}/{f}" for s in (0, 1) for f in ("benchmark.tsv", "history.csv", "metrics.json")
    ]  # an audited table's cells bring their audit.json too
    assert not any(n.endswith(".pt") for n in names)
    # the unfinished work, in parts of one stream; the finished cells' work and the stage inputs stay behind
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in sorted(out.glob("partial.tgz.*"))))) as tar:
        back = sorted(tar.getnames())
    assert back == sorted(n for n in planted if "client0" not in n and "request" not in n), back


def test_the_device_preparation_writes_the_plan_its_caches_and_what_to_carry(tmp_path):
    """scripts/device_prepare.sh, here before a lent GPU's call: the plan, without data jobs once the caches it
    names are prepared and compressed beside them (xz), the carried paths kept out of git, and the tool's carry list;
    what to move aside when the call would pass the tool's 64 MiB; scripts/device_env.sh, there, restores the cache."""
    work = tmp_path / "checkout"
    (work / "scripts").mkdir(parents=True)
    for script in ("device_prepare.sh", "device_env.sh"):
        (work / "scripts" / script).write_bytes((REPO / "scripts" / script).read_bytes())
    (work / "reference/big").mkdir(parents=True)
    (work / "reference/big/cells").write_bytes(bytes(65 * 2**20))  # committed cells the device does not read
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    env = os.environ | {"FED_NO_WHEELS": "1", "PYTHON": sys.executable}
    args = [str(REPO / "config/smoke.yaml"), "--table", TABLE, "--method", "fedavg"]
    proc = subprocess.run(["bash", "scripts/device_prepare.sh", ".gpu/plan.json", *args], cwd=work, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    plan = json.loads((work / ".gpu/plan.json").read_text())
    assert [j["kind"] for j in plan["jobs"]] == ["partition", "cell", "partition", "cell"]  # no data job left
    assert {"/.gpu/", "/.whl/"} <= set((work / ".git/info/exclude").read_text().split())
    assert 'carry: [".gpu/plan.json", "data/synthetic/tensors.pt.xz"]' in proc.stdout
    assert "over the device tool's 64 MiB" in proc.stdout and "mv reference/big /tmp/" in proc.stdout
    cache = work / "data/synthetic/tensors.pt"
    prepared = cache.read_bytes()
    cache.unlink()
    subprocess.run(["bash", "-c", "source scripts/device_env.sh"], cwd=work, env=env, check=True)
    assert cache.read_bytes() == prepared
