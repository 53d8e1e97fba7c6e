# The config, merged and checked before any job, and the grid it expands to (fed.grid: cells, stages, sweeps,
# figure variants, paths; testable without Snakemake). What stays here: path constants and the rules' input
# functions, each a few lines over GRID. Snakemake's own `config` is left as given.
import json
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

sys.path.insert(
    0, str(Path(workflow.basedir) / "src")
)  # the fed package, also before `pip install -e .`
from fed.config import canonical
from fed.grid import Grid
from fed.identity import algorithm_code_hash, code_hash, script_hash
from fed.validate import checked_config

try:  # papers merged under config.yaml and the overlays, schema defaults, checked against the registries
    _config, _warnings = checked_config(config, workflow.basedir)
except ValueError as _err:
    raise WorkflowError(f"fedrepro: {_err}") from None
for _warning in _warnings:
    print(f"fedrepro: {_warning}", file=sys.stderr)
GRID = Grid(_config, root=workflow.basedir)
# inputs cut short stop the plan before any job: Snakemake deletes the outputs of a job that fails on one (checked
# by the main process only: a cluster job's own parse could meet a stage output another job is writing)
_unreadable = GRID.unreadable_inputs() if workflow.is_main_process else []
if _unreadable:
    raise WorkflowError(
        "fedrepro: unreadable inputs:\n  - " + "\n  - ".join(_unreadable)
    )
# the merged config, with the sweep and figure variants under `methods`
CONFIG = GRID.config
DATA, RESULTS, REPORTS = GRID.data, GRID.results, GRID.reports
TRACKING_URI = GRID.tracking_uri
MLFLOW_READY = (
    f"{RESULTS}/mlflow/{{paper}}.ready"  # one per paper: adding a paper reruns nothing
)
TABLE = f"{REPORTS}/tables/{{table}}"
FIGURE = f"{REPORTS}/figures/{{figure}}"
CELL = f"{RESULTS}/runs/{{preset}}/{{dataset}}/{{partition}}/{{method}}/seed{{seed}}"
STAGE = f"{{preset}}/{{dataset}}/{{partition}}/seed{{seed}}/{{stage}}"


def key(w):
    """(preset, dataset, partition, seed) of a job's wildcards."""
    return (w.preset, w.dataset, w.partition, int(w.seed))


def cell_key(w):
    return (w.preset, w.dataset, w.partition, w.method, int(w.seed))


def stage_inputs(w):
    return GRID.stage_inputs(key(w), w.stage)


def stage_code(w):
    """Identity of the code a stage runs (fed.identity): a param, so an edit to that code reruns the stage."""
    return algorithm_code_hash(GRID.stage_algorithm(key(w), w.stage))


def script_code(script, *loaded):
    """Identity of the fed code a reporting script runs, ``loaded`` the modules it loads by name
    (fed.identity.script_hash): a param, so an edit to the reporting code reruns the tables and figures it
    changes, and no training."""
    return script_hash(Path(workflow.basedir) / "workflow/scripts" / script, *loaded)


def stage_record(w):
    """The stage as plain data for a job's params (the script rebuilds it with fed.stages.Stage.of)."""
    stage = GRID.stage(key(w), w.stage)
    return canonical({"kind": stage.kind, "params": dict(stage.params)})


def train_inputs(w):
    return {
        "data": GRID.data_path(w.dataset),
        "partition": GRID.partition_path(*key(w)),
        # also with tracking_mode: batch, so that switching the mode changes no job's inputs (Snakemake would rerun it)
        "store": MLFLOW_READY.format(paper=GRID.cell_paper[cell_key(w)]),
        **GRID.train_stages(key(w), w.method),
    }


def train_tracking(w):
    """The MLflow experiment and tags of a cell's run (key order kept: params are compared by their repr)."""
    paper = GRID.cell_paper[cell_key(w)]
    tags = {
        "paper": paper,
        "preset": w.preset,
        "dataset": w.dataset,
        "partition": w.partition,
    }
    tags |= {"method": w.method, "algorithm": GRID.algorithm(w.method), "seed": w.seed}
    return {"uri": TRACKING_URI, "experiment": paper, "tags": tags}


def rerun_options():
    """This invocation's --configfile and --config, for the report captions' re-run commands."""
    here = Path.cwd()
    files = [
        str(f.relative_to(here) if f.is_relative_to(here) else f)
        for f in workflow.overwrite_configfiles
    ]
    values = workflow.config_settings.config.items()
    pairs = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in values]
    return " ".join(
        ([f"--config {' '.join(pairs)}"] if pairs else [])
        + ([f"--configfile {' '.join(files)}"] if files else [])
    )


# The one key this workflow adds to Snakemake's config: captions are rendered with `snakemake.config` only.
config["_rerun_options"] = rerun_options()


def summary_report_text():
    """The report's landing page: the summary (verdict counts and claims) once the workflow has written it."""
    summary = Path(REPORTS, "summary.rst").resolve()
    return str(summary) if summary.exists() else "workflow/report/workflow.rst"


wildcard_constraints:
    preset=r"[^/]+",
    dataset=r"[^/]+",
    partition=r"[^/]+",
    method=r"[^/]+",
    seed=r"\d+",
    stage=r"[^/]+",


def answer_table(w):
    """The audited leaderboard behind an answer table (Grid.answers)."""
    return GRID.config["tables"][GRID.answers()[w.answer]]


def analysed_table(w):
    """The leaderboard behind an analyses table (Grid.analyses)."""
    return GRID.config["tables"][GRID.analyses()[w.analysed]]
