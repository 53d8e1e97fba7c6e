"""The smoke workflow through a real single-node SLURM cluster (Debian slurm-wlm + munge, started here)."""

import re
import shutil
import subprocess

import pandas as pd
import pytest
from conftest import REPO, snakemake, write_yaml

CLUSTER = REPO / "tests/slurm/cluster.sh"


@pytest.fixture(scope="module")
def slurm():
    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch") if shutil.which(b) is None]
    if missing:
        pytest.skip(f"SLURM not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge")
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        pytest.skip("snakemake-executor-plugin-slurm is not installed (pip install -e '.[dev]')")
    start = subprocess.run([str(CLUSTER), "start"], capture_output=True, text=True)
    if start.returncode != 0:
        pytest.skip(f"cannot run a SLURM cluster on this machine: {start.stdout[-1500:]} {start.stderr[-1500:]}")
    yield
    subprocess.run([str(CLUSTER), "stop"], capture_output=True)


@pytest.mark.slow
def test_smoke_workflow_through_slurm(slurm, tmp_path):
    overlay = write_yaml(
        tmp_path / "overlay.yaml",
        {
            "gpu_per_job": 1,  # every training job asks SLURM for a GPU (the node's two fake GPUs: both at once)
            "tracking_mode": "live",  # each job follows its cell in MLflow, SQLite from SLURM jobs (smoke: batch)
            "tables": {
                t: {"partitions": ["unimodal"], "methods": ["fedavg", "fedzdas"], "seeds": [0]}
                for t in ("fedzda_table1", "fedzda_table2")
            },
        },
    )
    targets = ["reports/tables/fedzda/table1.html", "reports/tables/fedzda/table2.html"]
    proc = snakemake(
        tmp_path,
        "--profile",
        str(REPO / "profiles/slurm"),
        "--configfile",
        str(REPO / "config/smoke.yaml"),
        str(overlay),
        "--",
        *targets,
    )
    out = proc.stdout + proc.stderr
    train_jobs = re.findall(r"submitted with SLURM jobid (\d+) \(log: \S+/rule_train/", out)
    assert len(train_jobs) == 2, out[-3000:]  # 1 partition x 2 methods x 1 seed, each its own sbatch job
    job = subprocess.run(["scontrol", "show", "job", train_jobs[0]], capture_output=True, text=True).stdout
    assert "JobState=COMPLETED" in job and "gres:gpu:1" in job, job

    table = pd.read_csv(tmp_path / "reports/tables/fedzda/table2.csv")
    assert (table.verdict == "no paper value").all() and set(table.method) == {"fedavg", "fedzdas"}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'results/mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("fedzda").experiment_id])
    assert len(runs) == 2 and all(r.data.tags["device"] == "cpu" for r in runs)
