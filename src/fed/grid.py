"""The grid: a merged, validated workflow config expanded into what the DAG runs and reads — cells, preparatory
stages, sweep variants and figure variants — with their file paths, the cell → paper map, and the inputs of every
table, figure, cost table, claim table and the summary.

Snakemake's rules (``workflow/rules/*.smk``) ask one ``Grid`` for everything and hold only the rules themselves;
the grid is plain Python, so it reads and tests without Snakemake (``tests/test_grid.py``)::

    grid = Grid.from_files(["config/fmnist.yaml"])   # what `snakemake --configfile config/fmnist.yaml` expands
    grid.table_cells(grid.config["tables"]["fedzda_table1"])   # [{preset, dataset, partition, method, seed}, ...]
    grid.stages[("fedzda", "fmnist", "multimodal", 0)]      # {"fedavg_prefix-rounds79": Stage, ...}

A *cell* is one training run, a dict ``fed.reporting.figure_kinds.cell``: (preset, dataset, partition, method,
seed). Its *key* is ``tuple(cell.values())``. A stage is keyed by (preset, dataset, partition, seed) and its
``fed.stages.Stage``.

The grid never changes the config it is given: it works on a copy, to which it adds the sweep variants
(``fedprox_best-mu0.01``) and the figure variants (``fedzdac-start90``) under ``methods``.
"""

from __future__ import annotations

import collections
import copy
import itertools
import json
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fed.algorithms import ALGORITHMS, build_algorithm
from fed.config import FLConfig, MethodSpec, resolve_preset, sweep_variants
from fed.data.datasets import cache_error
from fed.data.partition import read_partition
from fed.reference import stale_reasons
from fed.reporting.claims import claim_sources as claim_source_names
from fed.reporting.figure_kinds import FIGURE_KINDS, cell
from fed.stages import Stage
from fed.tracking import default_uri

Key = tuple[str, str, str, int]  # (preset, dataset, partition, seed): what a stage job is computed for
EXTENSIONS = ("csv", "md", "html")  # every table is written in these three formats


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


class Grid:
    """Everything the workflow expands from one config (see the module docstring).

    ``config``: the merged workflow config after schema validation (defaults set) and ``fed.validate.check_config``.
    ``root``: the repository, against which a relative ``reference_dir`` resolves. ``warn``: where a stale committed
    cell is reported (once per cell)."""

    def __init__(self, config: dict[str, Any], root: str | Path = ".", warn: Callable[[str], None] = _stderr):
        self.config = copy.deepcopy(config)
        self.warn = warn
        self.data = self.config["data_root"]
        self.results = self.config["results_dir"]
        self.reports = self.config["reports_dir"]
        # committed per-cell metrics of finished reference runs (relative paths: to the repository)
        self.reference = self.config.get("reference_dir") and str(Path(root) / self.config["reference_dir"])
        self.tracking_uri = self.config["tracking_uri"] or default_uri(self.results)
        self._current: dict[tuple, bool] = {}
        methods = self.config["methods"]

        # Swept methods (a paper's "best of" a grid) expand to one variant per grid point; tables pick among them.
        self.sweeps: dict[str, list[str]] = {}
        for name, spec in list(methods.items()):
            if "sweep" in spec:
                variants = sweep_variants(name, spec)
                methods.update(variants)
                self.sweeps[name] = list(variants)

        # Method variants that figures need and the config does not name (e.g. Fig. 5's fedzdac-start90). A variant
        # equal to a defined method (Fig. 5's start at 80 = the tables' Fed-ZDAC) is that method: one run, not two.
        self.alias: dict[str, str] = {}
        for fig in self.config["figures"].values():
            for name, spec in FIGURE_KINDS[fig["kind"]].variants(fig, methods).items():
                same = [m for m, s in methods.items() if s == spec and m != name]
                if same:
                    self.alias[name] = same[0]
                else:
                    methods.setdefault(name, spec)

        # cell key -> the paper whose MLflow experiment records it (the first table or figure that asks for it)
        self.cell_paper: dict[tuple, str] = {}
        sources = [(t, self.table_cells(t)) for t in self.config["tables"].values()]
        sources += [(f, self.figure_cells(f)) for f in self.config["figures"].values()]
        for item, cells in sources:
            for c in cells:
                self.cell_paper.setdefault(tuple(c.values()), item["paper"])
        # output path (under reports/tables or reports/figures, no extension) -> table or figure name
        self.tables = {t["output"]: name for name, t in self.config["tables"].items()}
        self.figures = {f["output"]: name for name, f in self.config["figures"].items()}
        self.claim_papers = {c["paper"] for c in self.config["claims"].values()}

        # Every stage the DAG needs, per (preset, dataset, partition, seed): one job each, shared by every cell or
        # figure that needs it.
        self.stages: dict[Key, dict[str, Stage]] = collections.defaultdict(dict)
        for p, d, part, m, s in self.cell_paper:
            if self.algorithm(m) in ALGORITHMS:
                for stage in self.method_stages(m).values():
                    self.stages[self.stage_key((p, d, part, s), stage)][stage.key] = stage
                    while before := self.tuned_after((p, d, part, s), stage):  # tune.after: that tuning first
                        (key, stage) = before
                        self.stages[key][stage.key] = stage
        for fig in self.config["figures"].values():
            for *key, stage in self.figure_stages(fig):
                self.stages[tuple(key)][stage.key] = stage

    @classmethod
    def from_files(cls, overlays: list[str | Path] = (), repo: str | Path = ".", **kwargs) -> Grid:
        """The grid ``snakemake --configfile <overlays>`` expands in ``repo``, built without Snakemake."""
        from fed.validate import checked_files

        return cls(checked_files(overlays, repo)[0], root=repo, **kwargs)

    # --- names --------------------------------------------------------------------------------------------------

    def preset(self, name: str) -> dict[str, Any]:
        """A preset with its ``base`` chain applied."""
        return resolve_preset(self.config["presets"], name)

    def algorithm(self, method: str) -> str:
        return self.config["methods"][method].get("algorithm", method)

    def table(self, output: str) -> dict[str, Any]:
        """The table entry written to ``reports/tables/<output>``."""
        return self.config["tables"][self.tables[output]]

    def figure(self, output: str) -> dict[str, Any]:
        """The figure entry written to ``reports/figures/<output>``."""
        return self.config["figures"][self.figures[output]]

    def figure_kind(self, fig: dict[str, Any]):
        return FIGURE_KINDS[fig["kind"]]

    # --- cells --------------------------------------------------------------------------------------------------

    def table_cells(self, table: dict[str, Any]) -> list[dict]:
        """Cells of a table's implemented methods; a swept method is every variant of its sweep."""
        return [
            cell(table["preset"], d, p, v, s)
            for d, p, m, s in itertools.product(
                table["datasets"], table["partitions"], table["methods"], table["seeds"]
            )
            if self.algorithm(m) in ALGORITHMS
            for v in self.sweeps.get(m, [m])
        ]

    def figure_cells(self, fig: dict[str, Any]) -> list[dict]:
        """Cells a figure reads, in the order its kind draws them (fed.reporting.figure_kinds); a variant equal to a
        defined method reads that method's cell."""
        return [{**c, "method": self.alias.get(c["method"], c["method"])} for c in self.figure_kind(fig).cells(fig)]

    def cost_cells(self, paper: str, preset: str, audited: bool = False) -> list[dict]:
        """Every table cell of one paper under one preset, once; with ``audited``, those of tables with
        ``audit: true`` only."""
        cells = {
            tuple(c.values()): c
            for t in self.config["tables"].values()
            if t["paper"] == paper and t["preset"] == preset and (t.get("audit") or not audited)
            for c in self.table_cells(t)
        }
        return list(cells.values())

    def cost_inputs(self, paper: str, preset: str) -> dict[str, list[str]]:
        """What a paper's cost and privacy tables read under one preset: every cell's metrics, and for audited
        cells their audit (leakage, bytes, the jobs' peak memory: rule audit); committed copies where current."""
        audited = self.cost_cells(paper, preset, audited=True)
        return {
            "metrics": [self.cell_path(**c) for c in self.cost_cells(paper, preset)],
            "audits": [self.cell_path(**c, file="audit.json") for c in audited],
        }

    def implemented(self) -> list[str]:
        """Every configured method (variants included) whose algorithm exists."""
        return [m for m in self.config["methods"] if self.algorithm(m) in ALGORITHMS]

    def cell_path(self, preset, dataset, partition, method, seed, file="metrics.json", committed=True) -> str:
        """A cell's file: the committed copy under ``reference_dir`` where there is one (finished reference runs; the
        tables rebuild from them without training), else the one the train rule computes under results_dir (always,
        with committed=False: a figure that reads a cell's model reads the metrics of that same run)."""
        rel = f"runs/{preset}/{dataset}/{partition}/{method}/seed{seed}/{file}"
        if (
            committed
            and self.reference
            and (Path(self.reference) / rel).exists()  # metrics and history are committed, never model weights
            and self.reference_is_current(preset, dataset, partition, method, seed)
        ):
            return str(Path(self.reference) / rel)
        return f"{self.results}/{rel}"

    def reference_is_current(self, preset: str, dataset: str, partition: str, method: str, seed: int) -> bool:
        """Whether ``reference_dir`` holds this cell, run with the settings the config now gives it; a stale copy is
        reported once and the cell recomputed."""
        key = (preset, dataset, partition, method, seed)
        if key not in self._current:
            self._current[key] = self._reference_is_current(*key)
        return self._current[key]

    def reference_path(self, preset, dataset, partition, method, seed) -> Path:
        return Path(self.reference) / f"runs/{preset}/{dataset}/{partition}/{method}/seed{seed}/metrics.json"

    @staticmethod
    def committed_record(path: Path) -> dict[str, Any]:
        """A committed cell's metrics.json; one cut short is an error naming it and the fix."""
        try:
            return json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(
                f"committed cell {path} is not valid JSON ({err}); restore it from git: git checkout -- {path}"
            ) from None

    def _reference_is_current(self, preset, dataset, partition, method, seed) -> bool:
        path = self.reference_path(preset, dataset, partition, method, seed)
        if not path.exists():
            return False
        spec = MethodSpec.from_config(method, self.config["methods"][method])
        reasons = stale_reasons(
            self.committed_record(path),
            FLConfig.from_preset(self.preset(preset), dataset, preset).with_protocol(spec.protocol).to_dict(),
            spec.algorithm,
            spec.params,
            self.config["partitions"][partition],
            FLConfig.defaults(),
            spec.tune,
        )
        if reasons:
            self.warn(
                f"reference cell {path.parent} was run with other {', '.join(reasons)} than the config gives it:"
                " it is recomputed"
            )
        return not reasons

    def trained_cells(self, paper: str) -> list[str]:
        """metrics.json of every cell of ``paper`` that the DAG trains (not those read from reference_dir), for the
        mlflow_log rule."""
        reads = [(c, True) for t in self.config["tables"].values() for c in self.table_cells(t)]
        for fig in self.config["figures"].values():
            committed = not self.figure_kind(fig).NEEDS_MODELS
            reads += [(c, committed) for c in self.figure_cells(fig)]
        paths = {
            self.cell_path(**c, committed=committed)
            for c, committed in reads
            if self.cell_paper[tuple(c.values())] == paper
        }
        return sorted(p for p in paths if p.startswith(f"{self.results}/"))

    # --- stages -------------------------------------------------------------------------------------------------

    def method_algorithm(self, method: str):
        """The algorithm a configured method builds (its ``tune:`` grid aside)."""
        spec = MethodSpec.from_config(method, self.config["methods"][method])
        return build_algorithm(spec.algorithm, **spec.params)

    def method_stages(self, method: str) -> dict[str, Stage]:
        """{name: Stage} the method declares (optional shortcuts only with warm_start: true), and its
        hyper-parameter selection if it has ``tune:``."""
        stages = self.method_algorithm(method).stages()
        if "tune" in self.config["methods"][method]:
            stages["tuning"] = self.tuning_stage(method)
        protocol = MethodSpec.from_config(method, self.config["methods"][method]).protocol
        return {
            n: s.with_protocol(protocol) for n, s in stages.items() if self.config["warm_start"] or not s.spec.optional
        }

    def tuning_stage(self, method: str) -> Stage:
        """The ``tuning`` stage of a method with ``tune:``, as declared (per seed where it says so)."""
        per_seed = {"per_seed": True} if self.config["methods"][method]["tune"].get("per_seed") else {}
        return Stage.of("tuning", method=method, **per_seed)

    def tuned_after(self, key: Key, stage: Stage) -> tuple[Key, Stage] | None:
        """The tuning a ``tuning`` stage starts from (``tune.after``): that method's tuning stage at the same cell
        key, or None."""
        after = self.config["methods"][stage.param("method")]["tune"].get("after") if stage.kind == "tuning" else None
        if not after:
            return None
        first = self.method_stages(after)["tuning"]  # with that method's protocol, as its own cells read it
        return self.stage_key(key, first), first

    @staticmethod
    def stage_key(key: Key, stage: Stage) -> Key:
        """(preset, dataset, partition, seed) of the stage job a cell of ``key`` reads: seed 0 for a stage computed
        once for every seed (fed.stages.StageKind.per_seed)."""
        return key if stage.per_seed else (*key[:3], 0)

    def stage(self, key: Key, name: str) -> Stage:
        return self.stages[key][name]

    def stage_method(self, key: Key, name: str) -> str | None:
        """The method a stage belongs to (a tuning stage's ``method`` parameter), or None."""
        return dict(self.stage(key, name).params).get("method")

    def stage_algorithm(self, key: Key, name: str) -> str:
        """The algorithm whose code a stage runs (``fed.identity``): its method's, or its kind's."""
        method = self.stage_method(key, name)
        return self.algorithm(method) if method else self.stage(key, name).spec.algorithm

    def stage_path(self, preset: str, dataset: str, partition: str, seed: int, stage: Stage) -> str:
        return f"{self.results}/stages/{preset}/{dataset}/{partition}/seed{seed}/{stage.key}.pt"

    def figure_stages(self, fig: dict[str, Any]) -> list[tuple]:
        """(preset, dataset, partition, seed, Stage) a figure reads (e.g. Fig. 3's oracle), in its kind's order."""
        return self.figure_kind(fig).stages(fig, self.config["methods"])

    def fedavg_prefix_of(self, key: Key, method: str) -> dict[str, Stage]:
        """A method that is FedAvg for longer than a prefix the DAG computes anyway (FedAvg itself, whose cell shares
        its trajectory with Fed-ZDA's) continues from the longest such prefix: {"warm": Stage} or {}."""
        if not self.config["warm_start"]:
            return {}
        until = min(self.method_algorithm(method).fedavg_until, self.preset(key[0])["rounds"])
        prefixes = [s for s in self.stages[key].values() if s.kind == "fedavg_prefix" and s.param("rounds") < until]
        return {"warm": max(prefixes, key=lambda s: s.param("rounds"))} if prefixes else {}

    def unreadable_inputs(self) -> list[str]:
        """Files the plan reads that exist but cannot be read — a committed cell, a partition, a prepared dataset or
        a stage's output cut short (an interrupted copy, a full disk) —, each with its fix. The workflow stops on them
        before any job: a train job that failed on one would have Snakemake delete the outputs it was to remake."""
        errors = []
        for key in self.cell_paper:
            if self.reference and (path := self.reference_path(*key)).exists():
                try:
                    self.committed_record(path)
                except ValueError as err:
                    errors.append(str(err))
        keys = {(p, d, part, s) for p, d, part, _, s in self.cell_paper} | set(self.stages)
        for path in sorted({self.partition_path(*key) for key in keys}):
            if Path(path).exists():
                try:
                    read_partition(path)
                except ValueError as err:
                    errors.append(str(err))
        for dataset in sorted({key[1] for key in keys}):
            if error := cache_error(dataset, self.data):
                errors.append(error)
        for key, stages in self.stages.items():  # torch.save's zip archives: a file cut short lacks the archive's end
            for path in map(Path, sorted(self.stage_path(*key, stage) for stage in stages.values())):
                if path.exists() and not zipfile.is_zipfile(path):
                    fix = "delete it and rerun, Snakemake recomputes it"
                    errors.append(f"stage output {path} is cut short (no complete archive); {fix}")
        return errors

    # --- inputs of the rules ------------------------------------------------------------------------------------

    def data_path(self, dataset: str) -> str:
        return f"{self.data}/{dataset}/tensors.pt"

    @staticmethod
    def partition_path(preset: str, dataset: str, partition: str, seed: int) -> str:
        return f"partitions/{preset}/{dataset}/{partition}/seed{seed}.json"

    def stage_inputs(self, key: Key, name: str) -> dict[str, str]:
        """Data, partition, and for a stage that continues from a lower one of its kind (FedAvg prefixes of one
        trajectory chain: round 89 continues from 79), that lower stage; for a tuning with ``tune.after``, the
        tuning it starts from (``after``)."""
        stage = self.stage(key, name)
        inputs = {"data": self.data_path(key[1]), "partition": self.partition_path(*key)}
        if before := self.tuned_after(key, stage):
            inputs["after"] = self.stage_path(*before[0], before[1])
        if ordinal := stage.spec.continues_from:
            lower = [
                s for s in self.stages[key].values() if s.kind == stage.kind and s.param(ordinal) < stage.param(ordinal)
            ]
            if lower:
                inputs["lower"] = self.stage_path(*key, max(lower, key=lambda s: s.param(ordinal)))
        return inputs

    def train_stages(self, key: Key, method: str) -> dict[str, str]:
        """{stage_<name>: path} of the stages a cell reads: its method's, or the FedAvg prefix it continues from."""
        stages = self.method_stages(method) or self.fedavg_prefix_of(key, method)
        return {f"stage_{n}": self.stage_path(*self.stage_key(key, s), s) for n, s in stages.items()}

    def figure_inputs(self, fig: dict[str, Any]) -> dict[str, list[str]]:
        """metrics.json and model.pt of every cell the figure reads, in figure_cells order, and its stages' files.
        Kinds that draw from metrics alone (Fig. 5) also draw from reference cells; the others read a run's model
        and its metrics from the same run."""
        cells = self.figure_cells(fig)
        kind = self.figure_kind(fig)
        return {
            "metrics": [self.cell_path(**c, committed=not kind.NEEDS_MODELS) for c in cells],
            "models": [self.cell_path(**c, file="model.pt") for c in cells if kind.NEEDS_MODELS],
            "data": [self.data_path(c["dataset"]) for c in cells if kind.NEEDS_DATA],
            "stages": [self.stage_path(*key, stage) for *key, stage in self.figure_stages(fig)],
        }

    def figure_presets(self, fig: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """{preset name: resolved preset} of every preset the figure's cells use."""
        return {p: self.preset(p) for p in self.figure_kind(fig).presets(fig)}

    def claim_sources(self, paper: str) -> dict[str, str]:
        """{source name: CSV path} of the tables and figures a paper's claims read."""
        names = {s for c in self.config["claims"].values() if c["paper"] == paper for s in claim_source_names(c)}
        return {
            name: f"{self.reports}/tables/{self.config['tables'][name]['output']}.csv"
            if name in self.config["tables"]
            else f"{self.reports}/figures/{self.config['figures'][name]['output']}.csv"
            for name in sorted(names)
        }

    def source_reduction(self, name: str) -> str:
        """Why a claim's source does not follow the paper's protocol ('' when it does)."""
        if name in self.config["tables"]:
            presets = [self.config["tables"][name]["preset"]]
        else:
            fig = self.config["figures"][name]
            presets = self.figure_kind(fig).presets(fig)
        reductions = (self.preset(p).get("reduction", "") for p in presets)
        return "; ".join(dict.fromkeys(r for r in reductions if r))

    def answers(self) -> dict[str, str]:
        """{<output>_answer: leaderboard table name} of every audited leaderboard: its answer table
        (fed.reporting.answer) reads the leaderboard, the paper's cost and privacy tables under its preset. Named
        after the leaderboard, not the preset: two boards may share a preset (the head-to-head protocol's)."""
        return {
            f"{t['output']}_answer": name
            for name, t in self.config["tables"].items()
            if t.get("layout") == "leaderboard" and t.get("audit")
        }

    def analyses(self) -> dict[str, str]:
        """{<output>_analyses: leaderboard table name} of every leaderboard with ``analyses: true``: the analyses
        named in advance (fed.reporting.analyses) of its cells, every metric."""
        return {f"{t['output']}_analyses": name for name, t in self.config["tables"].items() if t.get("analyses")}

    def cost_baseline(self, paper: str, preset: str) -> str:
        """The method a paper's cost table divides wall time by under one preset: its leaderboards' baseline where
        they name one (the head-to-head protocol's p_fedavg), else FedAvg."""
        named = {
            t.get("baseline", "fedavg")
            for t in self.config["tables"].values()
            if t["paper"] == paper and t["preset"] == preset and t.get("layout") == "leaderboard"
        }
        if len(named) > 1:
            raise ValueError(f"{paper}/{preset}: leaderboards with baselines {sorted(named)} share one cost table")
        return named.pop() if named else "fedavg"

    # --- what `rule all` builds ---------------------------------------------------------------------------------

    def table_outputs(self) -> list[str]:
        """Every table (the paper's, costs and privacy per paper and preset, claims, answers, analyses) in every
        format, and the summary."""
        costs = sorted({(t["paper"], t["preset"]) for t in self.config["tables"].values()})
        tables = [f"{self.reports}/tables/{t}" for t in self.tables]
        tables += [f"{self.reports}/tables/{paper}/costs_{p}" for paper, p in costs]
        tables += [f"{self.reports}/tables/{paper}/privacy_{p}" for paper, p in costs]
        tables += [f"{self.reports}/tables/{paper}/claims" for paper in sorted(self.claim_papers)]
        tables += [f"{self.reports}/tables/{answer}" for answer in self.answers()]
        tables += [f"{self.reports}/tables/{analysed}" for analysed in self.analyses()]
        summary = [f"{self.reports}/summary.{ext}" for ext in ("rst", "md", "html")]
        return [f"{t}.{ext}" for t in tables for ext in EXTENSIONS] + summary

    def verdict_tables(self) -> list[str]:
        """The tables in the paper's layout, whose cells carry verdicts: what the summary counts (a leaderboard
        compares methods with a baseline, not with a paper)."""
        return [out for out, name in self.tables.items() if self.config["tables"][name].get("layout") != "leaderboard"]

    def figure_outputs(self) -> list[str]:
        return [f"{self.reports}/figures/{f}.png" for f in self.figures]

    def partition_figures(self) -> list[str]:
        """One figure per (preset, dataset, partition) of the tables, for its first seed, and the
        ``partition_plots`` a paper shows without training on them (FedDPMS' CIFAR-100 over 50 clients)."""
        plots = {
            (t["preset"], d, p, t["seeds"][0])
            for t in self.config["tables"].values()
            for d in t["datasets"]
            for p in t["partitions"]
        }
        plots |= {
            (e["preset"], e["dataset"], e["partition"], e.get("seed", 0))
            for e in self.config.get("partition_plots", {}).values()
            if e
        }
        return sorted(f"{self.reports}/figures/partitions/{p}/{d}/{part}/seed{s}.png" for p, d, part, s in plots)

    def tracking_outputs(self) -> list[str]:
        """tracking_mode: batch — one mlflow_log job per paper that trains a cell."""
        if self.config["tracking_mode"] != "batch":
            return []
        papers = sorted(set(self.cell_paper.values()))
        return [f"{self.results}/mlflow/{p}.logged.tsv" for p in papers if self.trained_cells(p)]
