# Config validation and grid expansion. Every cell is keyed by what changes its result; two tables or
# figures that need the same cell share one training job.
import collections
import functools
import itertools
import json
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(
    0, str(Path(workflow.basedir) / "src")
)  # the fed package, also before `pip install -e .`
from fed.algorithms import ALGORITHMS, build_algorithm
from fed.reporting.claims import claim_sources as claim_source_names
from fed.reporting.figure_kinds import FIGURE_KINDS, cell
from fed.config import FLConfig, MethodSpec, resolve_preset, sweep_variants, with_papers
from fed.reference import stale_reasons
from fed.identity import algorithm_code_hash
from fed.stages import Stage
from fed.validate import check_config, schema_error
from fed.tracking import default_uri

try:  # each paper's presets, methods, tables and figures, under config.yaml and the overlays
    _merged = with_papers(config, Path(workflow.basedir) / "config" / "papers")
except ValueError as _err:
    raise WorkflowError(f"fedrepro: {_err}") from None
config.clear()
config.update(_merged)
for _key in (
    "download",
    "warm_start",
):  # --config download=false arrives as the string "false"
    if str(config.get(_key)).lower() in ("true", "false"):
        config[_key] = str(config[_key]).lower() == "true"
try:
    validate(config, "../schemas/config.schema.yaml")
except WorkflowError as _err:
    raise WorkflowError(f"fedrepro: {schema_error(_err)}") from None
try:
    for _warning in check_config(config):
        print(f"fedrepro: {_warning}", file=sys.stderr)
except ValueError as _err:
    raise WorkflowError(f"fedrepro: {_err}") from None

DATA = config["data_root"]
RESULTS = config["results_dir"]
# committed per-cell metrics of finished reference runs (relative paths: to the repository)
REFERENCE = config.get("reference_dir") and str(
    Path(workflow.basedir) / config["reference_dir"]
)
REPORTS = config["reports_dir"]
TRACKING_URI = config["tracking_uri"] or default_uri(RESULTS)
MLFLOW_READY = (
    f"{RESULTS}/mlflow/{{paper}}.ready"  # one per paper: adding a paper reruns nothing
)


def preset(name):
    return resolve_preset(config["presets"], name)


def algorithm(method):
    return config["methods"][method].get("algorithm", method)


def cell_path(
    preset, dataset, partition, method, seed, file="metrics.json", committed=True
):
    """A cell's file: the committed copy under `reference_dir` where there is one (finished reference runs; the
    tables rebuild from them without training), else the one the train rule computes under results_dir (always,
    with committed=False: a figure that reads a cell's model reads the metrics of that same run).
    """
    rel = f"runs/{preset}/{dataset}/{partition}/{method}/seed{seed}/{file}"
    if (
        committed
        and REFERENCE
        and (
            Path(REFERENCE) / rel
        ).exists()  # metrics and history are committed, never model weights
        and reference_is_current(preset, dataset, partition, method, seed)
    ):
        return str(Path(REFERENCE) / rel)
    return f"{RESULTS}/{rel}"


@functools.cache
def reference_is_current(preset_name, dataset, partition, method, seed):
    """Whether `reference_dir` holds this cell, run with the settings the config now gives it; a stale copy is
    reported once and the cell recomputed."""
    path = (
        Path(REFERENCE)
        / f"runs/{preset_name}/{dataset}/{partition}/{method}/seed{seed}/metrics.json"
    )
    if not path.exists():
        return False
    spec = MethodSpec.from_config(method, config["methods"][method])
    reasons = stale_reasons(
        json.loads(path.read_text()),
        FLConfig.from_preset(preset(preset_name), dataset, preset_name).to_dict(),
        spec.algorithm,
        spec.params,
        config["partitions"][partition],
        FLConfig.defaults(),
        spec.tune,
    )
    if reasons:
        print(
            f"reference cell {path.parent} was run with other {', '.join(reasons)} than the config gives it:"
            " it is recomputed",
            file=sys.stderr,
        )
    return not reasons


def table_cells(exp):
    """Cells of a table's implemented methods."""
    return [
        cell(exp["preset"], d, p, v, s)
        for d, p, m, s in itertools.product(
            exp["datasets"], exp["partitions"], exp["methods"], exp["seeds"]
        )
        if algorithm(m) in ALGORITHMS
        for v in SWEEPS.get(m, [m])
    ]


def figure_cells(fig):
    """Cells a figure reads, in the order its kind draws them (fed.reporting.figure_kinds); a variant equal to a
    defined method reads that method's cell."""
    return [
        {**c, "method": METHOD_ALIAS.get(c["method"], c["method"])}
        for c in FIGURE_KINDS[fig["kind"]].cells(fig)
    ]


# Swept methods (a paper's "best of" a grid) expand to one variant per grid point; tables pick among them.
SWEEPS = {}
for _name, _spec in list(config["methods"].items()):
    if "sweep" in _spec:
        _variants = sweep_variants(_name, _spec)
        config["methods"].update(_variants)
        SWEEPS[_name] = list(_variants)


# Method variants that figures need and the config does not name (e.g. Fig. 5's fedzdac-start90). A variant
# equal to a defined method (Fig. 5's start at 80 = the tables' Fed-ZDAC) is that method: one run, not two.
METHOD_ALIAS = {}
for _fig in config["figures"].values():
    for _name, _spec in (
        FIGURE_KINDS[_fig["kind"]].variants(_fig, config["methods"]).items()
    ):
        _same = [m for m, s in config["methods"].items() if s == _spec and m != _name]
        if _same:
            METHOD_ALIAS[_name] = _same[0]
        else:
            config["methods"].setdefault(_name, _spec)


# cell -> the paper whose MLflow experiment records it (the first experiment or figure that asks for it)
CELL_PAPER = {}
for _item, _cells in [(e, table_cells(e)) for e in config["tables"].values()] + [
    (f, figure_cells(f)) for f in config["figures"].values()
]:
    for _c in _cells:
        CELL_PAPER.setdefault(tuple(_c.values()), _item["paper"])
TABLES = {exp["output"]: name for name, exp in config["tables"].items()}
FIGURES = {fig["output"]: name for name, fig in config["figures"].items()}


def method_algorithm(method):
    """The algorithm a configured method builds (its `tune:` grid aside)."""
    spec = MethodSpec.from_config(method, config["methods"][method])
    return build_algorithm(spec.algorithm, **spec.params)


def method_stages(method):
    """{name: fed.stages.Stage} the method declares (optional shortcuts only with warm_start: true), and its
    hyper-parameter selection if it has `tune:`."""
    stages = method_algorithm(method).stages()
    if "tune" in config["methods"][method]:
        stages["tuning"] = Stage.of("tuning", method=method)
    return {
        n: s for n, s in stages.items() if config["warm_start"] or not s.spec.optional
    }


def stage_method(w):
    """The method a stage belongs to (a tuning stage's `method` parameter), or None."""
    stage = STAGES[(w.preset, w.dataset, w.partition, int(w.seed))][w.stage]
    return dict(stage.params).get("method")


def stage_code(w):
    """Identity of the code a stage runs (fed.identity): a param, so an edit to that code reruns the stage."""
    stage = STAGES[(w.preset, w.dataset, w.partition, int(w.seed))][w.stage]
    method = stage_method(w)
    return algorithm_code_hash(algorithm(method) if method else stage.spec.algorithm)


def stage_record(stage):
    """A stage as plain data for a job's params (the script rebuilds it with fed.stages.Stage.of)."""
    return {"kind": stage.kind, "params": dict(stage.params)}


def stage_path(preset, dataset, partition, seed, stage):
    return f"{RESULTS}/stages/{preset}/{dataset}/{partition}/seed{seed}/{stage.key}.pt"


def figure_stages(fig):
    """(preset, dataset, partition, seed, Stage) a figure reads (e.g. Fig. 3's oracle), in its kind's order."""
    return FIGURE_KINDS[fig["kind"]].stages(fig, config["methods"])


# Every stage the DAG needs, per (preset, dataset, partition, seed): one job each, shared by every cell or figure
# that needs it.
STAGES = collections.defaultdict(dict)


def stage_key(key, stage):
    """(preset, dataset, partition, seed) of the stage job a cell of ``key`` reads: seed 0 for a stage computed
    once for every seed (fed.stages.StageKind.per_seed)."""
    return key if stage.spec.per_seed else (*key[:3], 0)


for _preset, _d, _p, _m, _s in CELL_PAPER:
    if algorithm(_m) in ALGORITHMS:
        for _stage in method_stages(_m).values():
            STAGES[stage_key((_preset, _d, _p, _s), _stage)][_stage.key] = _stage
for _fig in config["figures"].values():
    for *_key, _stage in figure_stages(_fig):
        STAGES[tuple(_key)][_stage.key] = _stage


def stage_inputs(w):
    """Data, partition, and for a stage that continues from a lower one of its kind (FedAvg prefixes of one
    trajectory chain: round 89 continues from 79), that lower stage."""
    key = (w.preset, w.dataset, w.partition, int(w.seed))
    stage = STAGES[key][w.stage]
    inputs = {
        "data": f"{DATA}/{w.dataset}/tensors.pt",
        "partition": f"partitions/{w.preset}/{w.dataset}/{w.partition}/seed{w.seed}.json",
    }
    ordinal = stage.spec.continues_from
    if ordinal:
        lower = [
            s
            for s in STAGES[key].values()
            if s.kind == stage.kind and s.param(ordinal) < stage.param(ordinal)
        ]
        if lower:
            inputs["lower"] = stage_path(
                *key, max(lower, key=lambda s: s.param(ordinal))
            )
    return inputs


def train_inputs(w):
    inputs = {
        "data": f"{DATA}/{w.dataset}/tensors.pt",
        "partition": f"partitions/{w.preset}/{w.dataset}/{w.partition}/seed{w.seed}.json",
        # also with tracking_mode: batch, so that switching the mode changes no job's inputs (Snakemake would rerun it)
        "store": MLFLOW_READY.format(
            paper=CELL_PAPER[(w.preset, w.dataset, w.partition, w.method, int(w.seed))]
        ),
    }
    key = (w.preset, w.dataset, w.partition, int(w.seed))
    stages = method_stages(w.method) or fedavg_prefix_of(key, w.method)
    for name, stage in stages.items():
        inputs[f"stage_{name}"] = stage_path(*stage_key(key, stage), stage)
    return inputs


def fedavg_prefix_of(key, method):
    """A method that is FedAvg for longer than a prefix the DAG computes anyway (FedAvg itself, whose cell shares
    its trajectory with Fed-ZDA's) continues from the longest such prefix: {"warm": Stage} or {}.
    """
    if not config["warm_start"]:
        return {}
    until = method_algorithm(method).fedavg_until
    rounds = preset(key[0])["rounds"]
    prefixes = [
        s
        for s in STAGES[key].values()
        if s.kind == "fedavg_prefix" and s.param("rounds") < min(until, rounds)
    ]
    return {"warm": max(prefixes, key=lambda s: s.param("rounds"))} if prefixes else {}


def figure_inputs(w):
    """metrics.json and model.pt of every cell the figure reads, in figure_cells order, and its stages' files."""
    cells = figure_cells(config["figures"][FIGURES[w.figure]])
    # kinds that draw from metrics alone (Fig. 5) also draw from reference cells; the others read a run's model
    # and its metrics from the same run
    needs_models = FIGURE_KINDS[
        config["figures"][FIGURES[w.figure]]["kind"]
    ].NEEDS_MODELS
    needs_data = FIGURE_KINDS[config["figures"][FIGURES[w.figure]]["kind"]].NEEDS_DATA
    return {
        "metrics": [cell_path(**c, committed=not needs_models) for c in cells],
        "models": [cell_path(**c, file="model.pt") for c in cells if needs_models],
        "data": [f"{DATA}/{c['dataset']}/tensors.pt" for c in cells if needs_data],
        "stages": [
            stage_path(*key, stage)
            for *key, stage in figure_stages(config["figures"][FIGURES[w.figure]])
        ],
    }


@functools.cache
def trained_cells(paper):
    """metrics.json of every cell of `paper` that the DAG trains (not those read from reference_dir), for the
    mlflow_log rule."""
    reads = [(c, True) for e in config["tables"].values() for c in table_cells(e)]
    for fig in config["figures"].values():
        committed = not FIGURE_KINDS[fig["kind"]].NEEDS_MODELS
        reads += [(c, committed) for c in figure_cells(fig)]
    paths = {
        cell_path(**c, committed=committed)
        for c, committed in reads
        if CELL_PAPER[tuple(c.values())] == paper
    }
    return sorted(p for p in paths if p.startswith(f"{RESULTS}/"))


def tracking_outputs():
    """tracking_mode: batch — one mlflow_log job per paper that trains a cell."""
    if config["tracking_mode"] != "batch":
        return []
    papers = sorted(set(CELL_PAPER.values()))
    return [f"{RESULTS}/mlflow/{p}.logged.tsv" for p in papers if trained_cells(p)]


def cost_cells(paper, preset):
    """Every table cell of one paper under one preset, once."""
    cells = {
        tuple(c.values()): c
        for e in config["tables"].values()
        if e["paper"] == paper and e["preset"] == preset
        for c in table_cells(e)
    }
    return list(cells.values())


def summary_report_text():
    """The report's landing page: the summary (verdict counts and claims) once the workflow has written it."""
    summary = Path(REPORTS, "summary.rst").resolve()
    return str(summary) if summary.exists() else "workflow/report/workflow.rst"


def table_outputs():
    costs = {(e["paper"], e["preset"]) for e in config["tables"].values()}
    tables = [f"{REPORTS}/tables/{t}" for t in TABLES]
    tables += [f"{REPORTS}/tables/{paper}/costs_{p}" for paper, p in sorted(costs)]
    tables += [f"{REPORTS}/tables/{paper}/privacy_{p}" for paper, p in sorted(costs)]
    tables += [f"{REPORTS}/tables/{paper}/claims" for paper in sorted(CLAIM_PAPERS)]
    summary = [f"{REPORTS}/summary.{ext}" for ext in ("rst", "md", "html")]
    return [f"{t}.{ext}" for t in tables for ext in ("csv", "md", "html")] + summary


CLAIM_PAPERS = {c["paper"] for c in config["claims"].values()}


def claim_sources(paper):
    """{source name: CSV path} of the tables and figures a paper's claims read."""
    names = {
        s
        for c in config["claims"].values()
        if c["paper"] == paper
        for s in claim_source_names(c)
    }
    paths = {}
    for name in sorted(names):
        if name in config["tables"]:
            paths[name] = f"{REPORTS}/tables/{config['tables'][name]['output']}.csv"
        else:
            paths[name] = f"{REPORTS}/figures/{config['figures'][name]['output']}.csv"
    return paths


def source_reduction(name):
    """Why a claim's source does not follow the paper's protocol ('' when it does)."""
    if name in config["tables"]:
        presets = [config["tables"][name]["preset"]]
    else:
        fig = config["figures"][name]
        presets = FIGURE_KINDS[fig["kind"]].presets(fig)
    return "; ".join(
        dict.fromkeys(
            preset(p).get("reduction", "")
            for p in presets
            if preset(p).get("reduction")
        )
    )


def figure_outputs():
    return [f"{REPORTS}/figures/{f}.png" for f in FIGURES]


def partition_figures():
    """One figure per (preset, dataset, partition) of the tables, for its first seed, and the `partition_plots`
    a paper shows without training on them (FedDPMS' CIFAR-100 over 50 clients)."""
    figs = {
        f"{REPORTS}/figures/partitions/{e['preset']}/{d}/{p}/seed{e['seeds'][0]}.png"
        for e in config["tables"].values()
        for d in e["datasets"]
        for p in e["partitions"]
    }
    figs |= {
        f"{REPORTS}/figures/partitions/{e['preset']}/{e['dataset']}/{e['partition']}/seed{e.get('seed', 0)}.png"
        for e in config.get("partition_plots", {}).values()
        if e
    }
    return sorted(figs)


wildcard_constraints:
    preset=r"[^/]+",
    dataset=r"[^/]+",
    partition=r"[^/]+",
    method=r"[^/]+",
    seed=r"\d+",
    stage=r"[^/]+",
