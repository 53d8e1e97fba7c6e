"""MLflow: one run per cell identity, visible from its start, continued after a resume, FAILED on an error."""

import json

import pytest
from mlflow.tracking import MlflowClient

from fed import engine as engine_module
from fed.config import FLConfig, MethodSpec
from fed.data.datasets import load_labels
from fed.data.partition import make_partition
from fed.runner import run_cell
from fed.tracking import init_store

CFG = dict(num_clients=10, fraction=0.3, rounds=3, local_epochs=1, batch_size=20, eval_every=1, checkpoint_every=1)


@pytest.fixture
def cell(synthetic_root, tmp_path):
    part = tmp_path / "part.json"
    part.write_text(json.dumps(make_partition(load_labels("synthetic", synthetic_root), "iid", 10, seed=0)))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    init_store(uri, ["fedzda"])

    def run(**overrides):
        return run_cell(
            FLConfig(**(CFG | overrides)),
            MethodSpec("fedavg", "fedavg"),
            "synthetic",
            synthetic_root,
            part,
            0,
            tmp_path / "out",
            work_dir=tmp_path / "work",
            progress=None,
            tracking={"uri": uri, "experiment": "fedzda", "tags": {"method": "fedavg"}},
        )

    client = MlflowClient(uri)
    return run, lambda: client.search_runs([client.get_experiment_by_name("fedzda").experiment_id]), client, tmp_path


def test_three_reexecutions_leave_one_run(cell):
    run, runs, _, tmp_path = cell
    for _ in range(3):
        run()  # the second and third resume from the final checkpoint and continue the same run
    assert len(runs()) == 1 and runs()[0].info.status == "FINISHED"
    first_id = runs()[0].info.run_id
    import shutil

    shutil.rmtree(tmp_path / "work")
    run()  # recomputed from scratch: the run of that identity is replaced, not duplicated
    assert len(runs()) == 1 and runs()[0].info.run_id != first_id
    run(lr=0.05)  # another identity: its own run beside the first
    assert len(runs()) == 2


def test_a_failing_job_is_marked_failed_with_the_rounds_it_finished(cell, monkeypatch):
    run, runs, client, _ = cell
    real = engine_module.evaluate

    def explode(ctx):
        if ctx.round == 2:
            raise RuntimeError("boom")
        return real(ctx)

    monkeypatch.setattr(engine_module, "evaluate", explode)
    with pytest.raises(RuntimeError, match="boom"):
        run()
    (only,) = runs()
    assert only.info.status == "FAILED"
    # round 1 was logged while the job ran
    assert [m.step for m in client.get_metric_history(only.info.run_id, "global_acc")] == [1]
    monkeypatch.setattr(engine_module, "evaluate", real)
    run()  # resumes from round 1 and continues the same run to the end
    (again,) = runs()
    assert again.info.run_id == only.info.run_id and again.info.status == "FINISHED"


def test_a_torn_checkpoint_logs_no_round_twice(cell):
    """A truncated final checkpoint falls back to the one before it (fed.checkpoint): the rerun trains round 3 again
    and continues the cell's run, which already has round 3; it logs only the rounds after the last one logged."""
    run, runs, client, tmp_path = cell
    run()
    ckpt = tmp_path / "work" / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:100])
    run()
    (only,) = runs()
    assert only.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(only.info.run_id, "global_acc")] == [1, 2, 3]


def test_batch_logging_makes_the_run_a_live_job_makes_once_per_cell(cell, tmp_path):
    """tracking_mode: batch — the training job writes its files only; log_finished then makes the run a live job
    would have made (params, tags, one step per round, last/best), once: a second call adds nothing, nor does a
    call on a store whose live run is up to date, a recomputed cell replaces its run, and a non-finite metric
    (null in metrics.json) is logged as NaN."""
    import math

    from fed.tracking import log_finished

    run, runs, client, _ = cell
    live = run()  # followed live in the cell's store
    [live_run] = runs()
    metrics = tmp_path / "out" / "metrics.json"
    live_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # switching the store to batch mode keeps the live run: it carries its metrics.json's digest
    assert log_finished(live_uri, [metrics]) == {str(metrics): live_run.info.run_id}
    assert [r.info.run_id for r in runs()] == [live_run.info.run_id]
    batch_uri = f"sqlite:///{tmp_path / 'batch.db'}"
    init_store(batch_uri, ["fedzda"])
    batch = MlflowClient(batch_uri)

    def batch_runs():
        return batch.search_runs([batch.get_experiment_by_name("fedzda").experiment_id])

    [run_id] = log_finished(batch_uri, [metrics]).values()
    [logged] = batch_runs()
    assert logged.info.run_id == run_id and logged.info.status == "FINISHED"
    assert logged.data.params == live_run.data.params and logged.info.run_name == live_run.info.run_name
    internal = {"fed.metrics_sha256", "mlflow.runName"}
    assert {k: v for k, v in logged.data.tags.items() if k not in internal} == {
        k: v for k, v in live_run.data.tags.items() if k not in internal
    }
    assert logged.data.metrics == live_run.data.metrics  # last values: the round metrics, last_*, best_*, wall
    history = [(m.step, m.value) for m in batch.get_metric_history(run_id, "global_acc")]
    assert history == [(row["round"], row["global_acc"]) for row in live["history"]]

    assert log_finished(batch_uri, [metrics]) == {str(metrics): run_id} and len(batch_runs()) == 1

    record = json.loads(metrics.read_text())
    record["history"][-1]["global_acc"] = None  # as a diverged round is written
    metrics.write_text(json.dumps(record))
    [new_id] = log_finished(batch_uri, [metrics]).values()
    [replaced] = batch_runs()
    assert replaced.info.run_id == new_id != run_id
    assert math.isnan(batch.get_metric_history(new_id, "global_acc")[-1].value)


KILLED = """
import json, os, signal, sys
from fed import engine
from fed.config import FLConfig, MethodSpec
from fed.runner import run_cell

signum, root, part, tmp, uri, cfg = sys.argv[1:]
evaluate = engine.evaluate


def killed_at_round_2(ctx):
    if ctx.round == 2:
        os.kill(os.getpid(), getattr(signal, signum))
    return evaluate(ctx)


engine.evaluate = killed_at_round_2
run_cell(FLConfig(**json.loads(cfg)), MethodSpec("fedavg", "fedavg"), "synthetic", root, part, 0, f"{tmp}/out",
         work_dir=f"{tmp}/work", progress=None,
         tracking={"uri": uri, "experiment": "fedzda", "tags": {"method": "fedavg"}})
"""


def test_a_terminated_or_killed_job_leaves_one_run_that_the_rerun_continues(cell, synthetic_root):
    """A real training process (the cell fixture's cell) signalled at round 2: SIGTERM (Snakemake's Ctrl-C, SLURM's
    scancel) ends its run FAILED, not RUNNING; SIGKILL leaves it RUNNING. Each rerun resumes the checkpoint of round 1
    and continues that same run: one run per cell, its rounds logged once each."""
    import signal
    import subprocess
    import sys

    run, runs, client, tmp_path = cell

    def killed(signum):
        args = [signum, synthetic_root, tmp_path / "part.json", tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}"]
        return subprocess.run([sys.executable, "-c", KILLED, *map(str, args), json.dumps(CFG)], capture_output=True)

    assert killed("SIGTERM").returncode == 1  # SystemExit from the job's handler, not death by the signal
    (terminated,) = runs()
    assert terminated.info.status == "FAILED"
    assert [m.step for m in client.get_metric_history(terminated.info.run_id, "global_acc")] == [1]
    assert killed("SIGKILL").returncode == -signal.SIGKILL
    (after_kill,) = runs()
    assert after_kill.info.run_id == terminated.info.run_id and after_kill.info.status == "RUNNING"
    run()
    (finished,) = runs()
    assert finished.info.run_id == terminated.info.run_id and finished.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(finished.info.run_id, "global_acc")] == [1, 2, 3]
