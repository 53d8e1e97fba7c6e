"""The reliability fixes that a Snakemake plan shows, checked on the plan alone (``scripts/dag_jobs.py``: every job
with its inputs and its params as Snakemake compares them; a dry run, no training), so they hold in the fast suite
and not only on the smoke run (``test_workflow.py``, ``test_identity.py``: slow). Snakemake reruns a finished job
whose inputs or params changed; a job listed the same in two plans is not rerun by a move. Also what a job does with
its inputs and its checkpoint: unreadable inputs stop the plan, ``retrain`` recomputes a cell (``--forcerun``)."""

import json
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, snakemake, write_yaml

PROJECT = ("Snakefile", "config.yaml", "config", "workflow", "envs", "src")
PLANNED_WORK = ("prepare_data", "partition", "mlflow_init", "stage", "train")  # what costs compute or state


def plan(repo, workdir, *extra) -> dict[tuple, dict]:
    """Every job of the smoke config's plan, by (rule, outputs)."""
    workdir.mkdir(exist_ok=True)
    args = ["-s", repo / "Snakefile", "-d", workdir, "--configfile", repo / "config/smoke.yaml", *extra]
    out = subprocess.run(
        [sys.executable, REPO / "scripts/dag_jobs.py", *args], capture_output=True, text=True, check=True, cwd=workdir
    ).stdout
    return {(j["rule"], *j["output"]): j for j in json.loads(out)}


def copy_project(dest):
    dest.mkdir()
    for part in PROJECT:
        if (REPO / part).is_dir():
            shutil.copytree(REPO / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(REPO / part, dest / part)
    return dest


@pytest.fixture(scope="module")
def here(tmp_path_factory):
    return plan(REPO, tmp_path_factory.mktemp("here"))


def test_a_copied_project_plans_the_same_jobs(here, tmp_path):
    """Issue 8: the MLflow URI was absolute (a param of every train job), so a copied or moved project retrained
    every cell. The code and the working directory both elsewhere: every job that costs compute is the same job."""
    there = plan(copy_project(tmp_path / "copy"), tmp_path / "elsewhere")
    assert there.keys() == here.keys()
    work = [k for k in here if k[0] in PLANNED_WORK]
    assert sum(k[0] == "train" for k in work) == 45  # the smoke config's cells
    assert {k: there[k] for k in work} == {k: here[k] for k in work}


def test_an_edit_to_a_method_changes_the_params_of_its_own_jobs_only(here, tmp_path):
    """An edit changes the code hash that the train and stage rules carry as a param (fed.identity), so Snakemake
    reruns the cells and stages that execute the edited file — with --forcerun or without — and nothing else."""
    repo = copy_project(tmp_path / "copy")
    qffl = repo / "src/fed/algorithms/qffl.py"
    qffl.write_text(qffl.read_text() + "\n# an edit\n")
    there = plan(repo, tmp_path / "wd")
    changed = {k for k in here if here[k]["params"] != there[k]["params"]}
    assert changed and {here[k]["rule"] for k in changed} == {"train", "stage"}
    assert {here[k]["wildcards"].get("method") for k in changed if k[0] == "train"} == {"qffl"}
    assert {here[k]["wildcards"]["stage"] for k in changed if k[0] == "stage"} == {"tuning-methodqffl"}
    assert all(
        {p for p in here[k]["params"] if here[k]["params"][p] != there[k]["params"][p]} == {"code"} for k in changed
    )
    qffl_train = {k for k in here if k[0] == "train" and here[k]["wildcards"]["method"] == "qffl"}
    assert qffl_train <= changed


def test_unreadable_inputs_stop_the_plan_before_any_job(tmp_path):
    """A partition, a prepared dataset, a stage's output or a committed cell cut short (a copy, a full disk): a job
    would start, fail on it, and Snakemake would delete the outputs it was to remake; a committed cell ended in
    Snakemake's InputFunctionException. The workflow names each file and its fix before any job."""
    reference = tmp_path / "reference"
    committed = reference / "runs/smoke/synthetic/unimodal/fedavg/seed0/metrics.json"
    committed.parent.mkdir(parents=True)
    committed.write_text('{"config": {"rounds": 3')
    partition = tmp_path / "partitions/smoke/synthetic/multimodal/seed0.json"
    partition.parent.mkdir(parents=True)
    partition.write_text('{"scheme": "multimodal", "clients": [{"train": [1, 2')
    data = tmp_path / "data/synthetic/tensors.pt"
    data.parent.mkdir(parents=True)
    data.write_bytes(b"PK\x03\x04" + bytes(100))  # the start of a zip archive, without its end
    stage = tmp_path / "results/stages/smoke/synthetic/multimodal/seed0/fedavg_prefix-rounds2.pt"
    stage.parent.mkdir(parents=True)
    stage.write_bytes(b"PK\x03\x04" + bytes(100))
    overlay = write_yaml(tmp_path / "reference.yaml", {"reference_dir": str(reference)})
    proc = snakemake(tmp_path, "-n", "--configfile", str(REPO / "config/smoke.yaml"), str(overlay), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "fedrepro: unreadable inputs" in out, out[-3000:]
    assert f"committed cell {committed} is not valid JSON" in out and f"git checkout -- {committed}" in out
    assert "partition file partitions/smoke/synthetic/multimodal/seed0.json is not valid JSON" in out
    assert "data/synthetic/tensors.pt is unreadable" in out and "prepare_data rule" in out
    assert f"stage output {stage.relative_to(tmp_path)} is cut short" in out
    assert "InputFunctionException" not in out and "Traceback" not in out


def test_retrain_recomputes_a_cell_that_resuming_would_not(synthetic_root, tmp_path, monkeypatch):
    """The train job resumes its checkpoint (a killed or failed job loses nothing), also the final one: so
    ``--forcerun <cell>`` alone trained nothing. With ``--config retrain=true`` (a string, as Snakemake passes it) the
    job starts from round 0. The rule's own script, with a stand-in for Snakemake's ``snakemake`` object."""
    import json
    import runpy
    from types import SimpleNamespace

    from fed import engine
    from fed.data.datasets import load_labels
    from fed.data.partition import make_partition

    part = tmp_path / "seed0.json"
    part.write_text(json.dumps(make_partition(load_labels("synthetic", synthetic_root), "iid", 10, seed=0)))
    preset = dict(num_clients=10, fraction=0.3, rounds=3, local_epochs=1, batch_size=20, lr=0.02, momentum=0.0)
    preset |= dict(weight_decay=0.0, aggregation="mean", local_test_fraction=0.2, model="cnn_mnist", report="last")
    trained = []
    real = engine.run_round
    monkeypatch.setattr(engine, "run_round", lambda ctx, algo: trained.append(ctx.round) or real(ctx, algo))

    def job(**config):
        class Files(dict):
            __getattr__ = dict.__getitem__

        stub = SimpleNamespace(
            wildcards=SimpleNamespace(dataset="synthetic", method="fedavg", seed="0"),
            params=SimpleNamespace(
                preset=preset | {"checkpoint_every": 1},
                method={"algorithm": "fedavg"},
                data_root=str(synthetic_root),
                work_dir=str(tmp_path / "work"),
                tracking={"uri": "", "experiment": "smoke", "tags": {}},
            ),
            input=Files(data=str(synthetic_root / "synthetic/tensors.pt"), partition=str(part)),
            output=SimpleNamespace(metrics=str(tmp_path / "cell/metrics.json")),
            log=[str(tmp_path / "train.log")],
            threads=1,
            config={"tracking_mode": "batch", **config},
            scriptdir=str(REPO / "workflow/scripts"),
        )
        trained.clear()
        runpy.run_path(str(REPO / "workflow/scripts/train.py"), init_globals={"snakemake": stub})
        return list(trained), (tmp_path / "train.log").read_text()

    assert job()[0] == [0, 1, 2]
    rounds, log = job()
    assert rounds == [] and "at round 3" in log  # a rerun resumes the final checkpoint
    rounds, log = job(retrain="true")
    assert rounds == [0, 1, 2] and "resumed" not in log
    assert job(retrain="false")[0] == []


def test_retrain_changes_no_job_of_the_plan(here, tmp_path):
    """``retrain`` is read from the config by the train script, never a param: giving it reruns no job by itself
    (``--forcerun`` names the cells), and the schema accepts it as Snakemake passes it (a string)."""
    there = plan(REPO, tmp_path / "retrain", "--config", "retrain=true")
    work = [k for k in here if k[0] in PLANNED_WORK]
    assert {k: there[k] for k in work} == {k: here[k] for k in work}


def test_python_dash_m_fed_is_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "fed", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: fed "), proc.stderr[-2000:]
