# Config validation and grid expansion. Every cell is keyed by what changes its result; two experiments that
# need the same cell share one training job.
import collections
import itertools
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(
    0, str(Path(workflow.basedir) / "src")
)  # the fed package, also before `pip install -e .`
from fed.algorithms import ALGORITHMS
from fed.config import resolve_preset
from fed.validate import check_config
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


def start_round(method):
    return config["methods"][method].get("start_round", 1)


def start_variant(method, r):
    """The method variant that starts augmenting at round r (start-round ablations), e.g. fedzdac-start90."""
    name = f"{method}-start{r}"
    config["methods"].setdefault(name, {**config["methods"][method], "start_round": r})
    return name


def cell_path(preset, dataset, partition, method, seed, file="metrics.json"):
    return f"{RESULTS}/runs/{preset}/{dataset}/{partition}/{method}/seed{seed}/{file}"


def cell(preset, dataset, partition, method, seed):
    return dict(
        preset=preset, dataset=dataset, partition=partition, method=method, seed=seed
    )


def experiment_cells(exp):
    """Cells of an experiment's implemented methods."""
    return [
        cell(exp["preset"], d, p, m, s)
        for d, p, m, s in itertools.product(
            exp["datasets"], exp["partitions"], exp["methods"], exp["seeds"]
        )
        if algorithm(m) in ALGORITHMS
    ]


def figure_cells(fig):
    """Cells a figure reads, in a fixed order (see workflow/scripts/figure.py)."""
    kind, seeds = fig["kind"], fig["seeds"]
    if kind == "start_round_variance":
        return [
            cell(fig["preset"], d, fig["partition"], start_variant(fig["method"], r), s)
            for d in fig["datasets"]
            for r in fig["start_rounds"]
            for s in seeds
        ]
    refs = (
        [fig["source"], fig["oracle"]]
        if kind == "zsdg_class_accuracy"
        else list(fig["sources"].values())
    )
    return [
        cell(ref["preset"], d, ref["partition"], ref["method"], s)
        for d in fig["datasets"]
        for s in seeds
        for ref in refs
    ]


# cell -> the paper whose MLflow experiment records it (the first experiment or figure that asks for it)
CELL_PAPER = {}
for _item, _cells in [
    (e, experiment_cells(e)) for e in config["experiments"].values()
] + [(f, figure_cells(f)) for f in config["figures"].values()]:
    for _c in _cells:
        CELL_PAPER.setdefault(tuple(_c.values()), _item["paper"])
TABLES = {exp["output"]: name for name, exp in config["experiments"].items()}
FIGURES = {fig["output"]: name for name, fig in config["figures"].items()}
PAPERS = sorted(
    {
        item["paper"]
        for item in [*config["experiments"].values(), *config["figures"].values()]
    }
)

# Start-round runs warm-start from FedAvg prefixes; prefixes of one (preset, dataset, partition, seed) chain.
PREFIXES = collections.defaultdict(set)
if config["warm_start"]:
    for _preset, _d, _p, _m, _s in CELL_PAPER:
        if start_round(_m) > 1:
            PREFIXES[(_preset, _d, _p, _s)].add(start_round(_m) - 1)


def prefix_path(preset, dataset, partition, seed, r):
    return f"{RESULTS}/prefix/{preset}/{dataset}/{partition}/seed{seed}/round{r}.pt"


def lower_prefix(w):
    """The prefix just below round w.r of the same trajectory, if any (the prefix rule continues from it)."""
    key = (w.preset, w.dataset, w.partition, int(w.seed))
    lower = [r for r in PREFIXES[key] if r < int(w.r)]
    return {"warm": prefix_path(*key, max(lower))} if lower else {}


def train_inputs(w):
    inputs = {
        "data": f"{DATA}/{w.dataset}/tensors.pt",
        "partition": f"partitions/{w.preset}/{w.dataset}/{w.partition}/seed{w.seed}.json",
        "store": MLFLOW_READY,
    }
    r = start_round(w.method)
    if config["warm_start"] and r > 1:
        inputs["warm"] = prefix_path(w.preset, w.dataset, w.partition, w.seed, r - 1)
    return inputs


def figure_inputs(w):
    """metrics.json and model.pt of every cell the figure reads, in figure_cells order."""
    cells = figure_cells(config["figures"][FIGURES[w.figure]])
    return {
        "metrics": [cell_path(**c) for c in cells],
        "models": [cell_path(**c, file="model.pt") for c in cells],
    }


def cost_cells(paper, preset):
    """Every table cell of one paper under one preset, once."""
    cells = {
        tuple(c.values()): c
        for e in config["experiments"].values()
        if e["paper"] == paper and e["preset"] == preset
        for c in experiment_cells(e)
    }
    return list(cells.values())


def table_outputs():
    costs = {(e["paper"], e["preset"]) for e in config["experiments"].values()}
    tables = [f"{REPORTS}/tables/{t}" for t in TABLES]
    tables += [f"{REPORTS}/tables/{paper}/costs_{p}" for paper, p in sorted(costs)]
    return [f"{t}.{ext}" for t in tables for ext in ("csv", "md", "html")]


def figure_outputs():
    return [f"{REPORTS}/figures/{f}.png" for f in FIGURES]


def partition_figures():
    """One figure per (preset, dataset, partition) of the tables, for its first seed."""
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
    r=r"\d+",
