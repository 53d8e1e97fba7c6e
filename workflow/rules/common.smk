# Config validation and grid expansion. Every cell is keyed by what changes its result; two experiments that
# need the same cell share one training job.
import itertools
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(0, str(Path(workflow.basedir) / "src"))  # the fed package, also before `pip install -e .`
from fed.algorithms import ALGORITHMS
from fed.config import check_config, resolve_preset
from fed.tracking import default_uri


validate(config, "../schemas/config.schema.yaml")
try:
    for _warning in check_config(config):
        print(f"fedrepro: {_warning}", file=sys.stderr)
except ValueError as _err:
    raise WorkflowError(f"fedrepro: {_err}") from None

DATA = config["data_root"]
RESULTS = config["results_dir"]
REPORTS = config["reports_dir"]
TRACKING_URI = config["tracking_uri"] or default_uri(RESULTS)
MLFLOW_READY = f"{RESULTS}/mlflow.ready"


def preset(name):
    return resolve_preset(config["presets"], name)


def algorithm(method):
    return config["methods"][method].get("algorithm", method)


def cell_path(preset, dataset, partition, method, seed):
    return f"{RESULTS}/runs/{preset}/{dataset}/{partition}/{method}/seed{seed}/metrics.json"


def experiment_cells(exp):
    """(dataset, partition, method, seed) of an experiment's implemented methods."""
    return [
        dict(dataset=d, partition=p, method=m, seed=s)
        for d, p, m, s in itertools.product(exp["datasets"], exp["partitions"], exp["methods"], exp["seeds"])
        if algorithm(m) in ALGORITHMS
    ]


# cell -> the paper whose MLflow experiment records it (the first experiment that asks for it)
CELL_PAPER = {}
for _exp in config["experiments"].values():
    for _c in experiment_cells(_exp):
        CELL_PAPER.setdefault((_exp["preset"], *_c.values()), _exp["paper"])
TABLES = {exp["output"]: name for name, exp in config["experiments"].items()}
PAPERS = sorted({exp["paper"] for exp in config["experiments"].values()})


def table_outputs():
    return [f"{REPORTS}/tables/{t}.{ext}" for t in TABLES for ext in ("csv", "md", "html")]


def partition_figures():
    """One figure per (preset, dataset, partition) in use, for its first seed."""
    figs = {
        f"{REPORTS}/figures/partitions/{e['preset']}/{d}/{p}/seed{e['seeds'][0]}.png"
        for e in config["experiments"].values()
        for d in e["datasets"]
        for p in e["partitions"]
    }
    return sorted(figs)


wildcard_constraints:
    preset=r"[^/]+",
    dataset=r"[^/]+",
    partition=r"[^/]+",
    method=r"[^/]+",
    seed=r"\d+",
