"""The reliability fixes that a Snakemake plan shows, checked on the plan alone (``scripts/dag_jobs.py``: every job
with its inputs and its params as Snakemake compares them; a dry run, no training), so they hold in the fast suite
and not only on the smoke run (``test_workflow.py``, ``test_identity.py``: slow). Snakemake reruns a finished job
whose inputs or params changed; a job listed the same in two plans is not rerun by a move."""

import json
import shutil
import subprocess
import sys

import pytest
from conftest import REPO

PROJECT = ("Snakefile", "config.yaml", "config", "workflow", "envs", "src")
PLANNED_WORK = ("prepare_data", "partition", "mlflow_init", "stage", "train")  # what costs compute or state


def plan(repo, workdir) -> dict[tuple, dict]:
    """Every job of the smoke config's plan, by (rule, outputs)."""
    workdir.mkdir(exist_ok=True)
    args = ["-s", repo / "Snakefile", "-d", workdir, "--configfile", repo / "config/smoke.yaml"]
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
    assert sum(k[0] == "train" for k in work) >= 50
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
