"""Run one cell (preset × dataset × partition × method × seed): the function behind the ``train`` rule and
``fed run``. Writes ``metrics.json`` and ``history.csv`` to ``out_dir`` and, given ``tracking``, follows the run in
MLflow live (or, with ``tracking["live"]`` false, records what fed.tracking.log_finished needs to log it later)."""

from __future__ import annotations

import csv
import dataclasses
import importlib
import json
import math
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from fed import checkpoint
from fed.algorithms import build_algorithm
from fed.config import FLConfig, MethodSpec, point_label
from fed.data.datasets import load_dataset
from fed.data.partition import PartitionError, num_clients_for_avg_size, read_partition, validation_split
from fed.engine import Engine
from fed.metrics import LOWER_IS_BETTER, VALIDATION_METRICS
from fed.reference import json_safe
from fed.stages import Stage


def make_engine(
    cfg: FLConfig,
    method: MethodSpec,
    dataset: str,
    data_root: str | Path,
    partition_file: str | Path,
    seed: int,
    threads: int = 1,
    validation_fraction: float = 0.0,
    **engine_kwargs,
) -> Engine:
    """An engine for one cell; with ``validation_fraction`` its local test splits are validation splits carved
    from the clients' training data (``fed.data.partition.validation_split``)."""
    torch.set_num_threads(threads)
    train = load_dataset(dataset, data_root, "train")
    test = load_dataset(dataset, data_root, "test")
    partition = read_partition(partition_file)
    check_clients(cfg, partition, partition_file, len(train.y))
    if validation_fraction:
        partition = validation_split(partition, train.y.cpu().numpy(), validation_fraction, seed)
    return Engine(
        cfg,
        build_algorithm(method.algorithm, **method.params),
        train,
        test,
        partition,
        seed,
        label=cell_label(dataset, partition_file, method, seed),
        **engine_kwargs,
    )


def partition_spec(partition_file: str | Path) -> dict:
    """The scheme and parameters a partition file was made with."""
    part = read_partition(partition_file)
    return {k: part[k] for k in ("scheme", "params", "num_clients", "local_test_fraction") if k in part}


def check_clients(cfg: FLConfig, partition: dict, partition_file: str | Path, num_samples: int) -> None:
    """A partition made for as many clients as the settings have (``fed run`` with another preset's file would
    train on it and record the preset's number); a partition that does not say (made by hand) is taken as it is."""
    made = partition.get("num_clients")
    expected = (
        cfg.num_clients if cfg.avg_client_size is None else num_clients_for_avg_size(num_samples, cfg.avg_client_size)
    )
    if made is not None and made != expected:
        have = f"num_clients={expected}" + (f" (avg_client_size={cfg.avg_client_size})" if cfg.avg_client_size else "")
        raise PartitionError(
            f"partition file {partition_file} was made for {made} clients; the settings have {have}: make the "
            f"partition for {expected} clients (fed partition --clients {expected}) or set num_clients={made}"
        )


def cell_label(dataset: str, partition_file: str | Path, method: MethodSpec, seed: int) -> str:
    return f"{dataset}/{Path(partition_file).parent.name}/{method.name}/seed{seed}"


@dataclass
class StageJob:
    """One stage to run: what it is, on which dataset, where its file goes, the lower stage it continues from,
    ``engine(method, rounds=None, **engine_kwargs)`` — an engine on the stage's data, partition, seed and work
    directory (``method``: an algorithm name or a MethodSpec) — and the method a ``tuning`` stage tunes."""

    stage: Stage
    dataset: str
    out: Path
    lower: str | None
    engine: Callable[..., Engine]
    method: MethodSpec | None = None
    work_dir: Path | None = None
    progress: TextIO | None = None
    after: str | None = None  # a tuning's ``tune.after``: the file of the tuning whose choice it starts from
    rounds: int | None = None  # the preset's rounds (a tuning's ``round_params`` scale from them)
    threads: int = 1  # the job's threads (a DP-CGAN stage trains as many clients at once)
    stop_at: float | None = None  # the deadline (fed campaign): its FL runs checkpoint, a DP-CGAN's clients stop


def run_fedavg_prefix(job: StageJob) -> None:
    """FedAvg up to round r; its final checkpoint seeds every start-round run after it."""
    run = job.engine("fedavg", rounds=job.stage.param("rounds"), stages={"warm": job.lower} if job.lower else None)
    run.run()  # a diverged prefix still ends with its checkpoint, so the runs after it record the divergence
    shutil.copyfile(run.checkpoint_path, job.out)


def run_vae_prelim(job: StageJob) -> None:
    """FedDPMS' Stage I: P rounds of FedDPMS (its rounds ≤ P are Stage I); its final checkpoint, tagged with this
    stage, is where FedDPMS cells continue (``Engine.load_warm_start`` checks the tag)."""
    stage = dict(job.stage.params)
    params = {"preliminary_rounds": stage["rounds"], "vae_weight": stage["vae_weight"], "kld": stage.get("kld", "mean")}
    run = job.engine(MethodSpec("feddpms-stage1", "feddpms", params), rounds=job.stage.param("rounds"))
    run.run()
    ckpt = torch.load(run.checkpoint_path, weights_only=False, map_location="cpu")
    torch.save({**ckpt, "stage": job.stage.declared.key}, job.out)


def save_model(job: StageJob, run: Engine, summary: dict[str, Any]) -> None:
    """A stage's model: its state, its architecture, its round and last-round metrics
    (``fed.reporting.zsdg_figures.load_stage_model`` rebuilds it)."""
    record = {
        "state": run.global_state,
        "model": run.cfg.model,
        "dataset": job.dataset,
        "round": run.round,
        "diverged": summary["diverged"],
        "last": json_safe(summary["last"]),
    }
    torch.save(record, job.out)


def run_centralized_model(job: StageJob) -> None:
    """Centralized training for the preset's rounds; writes the model, its architecture and its last-round
    metrics (an oracle is a result too: its test accuracy goes beside the figure that uses it)."""
    run = job.engine("centralized")
    save_model(job, run, run.run())


def run_model_at(job: StageJob) -> None:
    """The cell's run, stopped after round r (its config unchanged: a method that plans by the rounds to come, e.g.
    CCVR's calibration at the last round, plans as in the cell), and its global model then: what an attack on an
    early round reads (FLea Fig. 9)."""
    run = job.engine(job.method, until=job.stage.param("rounds"))
    save_model(job, run, run.run())


def run_tuning(job: StageJob) -> None:
    """One run per point of the method's ``tune.grid`` on held-out client data; writes every point's validation
    metrics (``validation_<metric>`` for each of VALIDATION_METRICS; None for a diverged point) and the point
    ``select_point`` chooses. With ``tune.after`` every point runs at the values that tuning chose (``job.after``),
    and the chosen values include them (an empty grid: those values alone); ``tune.round_params`` run scaled to the
    tuning's rounds (``scaled``). Where every point diverged the record says ``diverged`` and chooses none: the
    method diverged in that regime and seed (docs/headtohead-protocol.md, section 2.5), and its cell records so."""
    spec, tune = job.method, job.method.tune
    first = checkpoint.load_file(job.after, "cpu", "tuning stage")["chosen"] if job.after else {}
    spec = spec.at(first)  # tune.after: at the values that tuning chose (the protocol's shared lr), then its own grid
    scores = []
    for point, work_dir in tuning_points(spec, job.work_dir):
        run = job.engine(
            spec.at(scaled(point, tune, job.rounds), f"{spec.name}-{point_label(point)}"),
            rounds=tune["rounds"],
            validation_fraction=tune["validation_fraction"],
            work_dir=work_dir,
        )
        summary = run.run()
        values = {m: None if summary["diverged"] else summary["last"].get(m) for m in VALIDATION_METRICS}
        values = {f"validation_{m}": v if v is not None and math.isfinite(v) else None for m, v in values.items()}
        scores.append({**point, **values, "diverged": summary["diverged"]})
    diverged = bool(scores) and all(s["diverged"] for s in scores)
    chosen = first | ({k: select_point(scores, tune)[k] for k in tune["grid"]} if scores and not diverged else {})
    record = {"chosen": chosen, "scores": scores, "tune": tune, "diverged": diverged}
    torch.save(record | ({"after": first} if job.after else {}), job.out)


def tuning_points(spec: MethodSpec, work_dir: Path) -> list[tuple[dict[str, Any], Path]]:
    """A tuning's grid points, each with the work directory of its run."""
    return [(point, work_dir / point_label(point)) for point in (spec.grid() if spec.tune["grid"] else [])]


def scaled(point: dict[str, Any], tune: dict[str, Any], rounds: int | None) -> dict[str, Any]:
    """A grid point as its tuning run runs it: each of ``tune.round_params`` (a round number, e.g. Fed-ZDA's start
    round) scaled from the preset's ``rounds`` to the tuning's, at least round 1; the point keeps the preset's value."""
    names = tune.get("round_params") or []
    if not names or not tune.get("rounds") or not rounds:
        return point
    return {k: max(1, round(v * tune["rounds"] / rounds)) if k in names else v for k, v in point.items()}


def select_point(scores: list[dict[str, Any]], tune: dict[str, Any]) -> dict[str, Any]:
    """The grid point with the best validation ``select_by`` (highest accuracy, lowest variance) among the points
    that did not diverge. With ``within: {metric, tolerance, of}`` only the points whose validation ``metric`` is
    at most ``tolerance`` worse than that of ``of`` compete: ``of: best`` (default), the best point by ``metric``;
    or a grid point, e.g. ``{q: 0.0}``. Fairness at a bounded accuracy cost, for q-FFL: ``select_by:
    client_acc_variance, within: {metric: local_acc_mean, tolerance: 1.0, of: {q: 0.0}}`` — the lowest variance whose
    mean accuracy is within 1 pp of q = 0 (FedAvg); the authors' code selects nothing (q is fixed per dataset in its
    scripts), and that their paper states this rule is not verified (docs/results/fedzda.md, "Why we differ").
    ``scores`` as run_tuning writes them (older records hold local_acc_mean only)."""

    def good(metric: str, score: dict[str, Any]) -> float:  # higher is better
        return (-1 if metric in LOWER_IS_BETTER else 1) * score[f"validation_{metric}"]

    within = tune.get("within")
    needed = [tune["select_by"]] + ([within["metric"]] if within else [])
    usable = [s for s in scores if not s["diverged"] and all(s.get(f"validation_{m}") is not None for m in needed)]
    if not usable:
        raise RuntimeError(f"tuning: no grid point has finite validation {needed} ({scores})")
    if within:
        metric, of = within["metric"], within.get("of", "best")
        if of == "best":
            ref = max(usable, key=lambda s: good(metric, s))
        else:
            ref = next((s for s in usable if all(s[k] == v for k, v in of.items())), None)
            if ref is None:
                raise RuntimeError(f"tuning: the reference point {of} diverged or was not run ({scores})")
        usable = [s for s in usable if good(metric, s) >= good(metric, ref) - within["tolerance"]]
    return max(usable, key=lambda s: good(tune["select_by"], s))


def tuned(method: MethodSpec, stages: dict[str, Path] | None) -> tuple[MethodSpec, dict[str, Any] | None]:
    """The method with the values its ``tuning`` stage chose, and that stage's record (None without one)."""
    if not stages or "tuning" not in stages:
        return method, None
    record = checkpoint.load_file(stages["tuning"], "cpu", "tuning stage")
    return method.at(record["chosen"]), record


STAGE_RUNNERS: dict[str, Callable[[StageJob], None]] = {
    "fedavg_prefix": run_fedavg_prefix,
    "centralized_model": run_centralized_model,
    "tuning": run_tuning,
    "vae_prelim": run_vae_prelim,
    "model_at": run_model_at,
}


def stage_runs(
    kind: str, params: dict[str, Any], rounds: int, method: MethodSpec | None, work_dir: Path
) -> list[tuple[Path, int]] | None:
    """The FL runs a stage of ``kind`` (one of STAGE_RUNNERS) makes, as its function above makes them: the work
    directory and the rounds of each (``rounds``: the preset's), whose checkpoints say where a stopped stage stands
    (``fed campaign --status``); None for a method's stage (METHOD_STAGES), whose progress is its own."""
    if kind in ("fedavg_prefix", "vae_prelim", "model_at"):
        return [(work_dir, params["rounds"])]
    if kind == "centralized_model":
        return [(work_dir, rounds)]
    if kind == "tuning":
        return [(work, method.tune["rounds"] or rounds) for _, work in tuning_points(method, work_dir)]
    if kind in STAGE_RUNNERS:
        raise NotImplementedError(f"stage_runs: say which FL runs a {kind!r} stage makes")
    return None


# Kinds whose code is one method's: the module whose ``run_stage(job)`` runs it, imported when such a stage runs, so
# it is in no cell's code identity (``fed.identity``); its numbers come from modules its method imports (DA-FL's
# ``fed.dpgan``), so they are in that method's identity (``StageKind.algorithm``), its scheduling in none.
METHOD_STAGES: dict[str, str] = {"dp_cgan": "fed.gan_stage"}


def stage_runner(kind: str) -> Callable[[StageJob], None]:
    """The function that runs stages of ``kind``."""
    if kind in METHOD_STAGES:
        return importlib.import_module(METHOD_STAGES[kind]).run_stage
    return STAGE_RUNNERS[kind]


def run_stage(
    stage: Stage,
    cfg: FLConfig,
    dataset: str,
    data_root: str | Path,
    partition_file: str | Path,
    seed: int,
    out: str | Path,
    work_dir: str | Path,
    lower: str | None = None,
    threads: int = 1,
    progress: TextIO | None = sys.stderr,
    method: MethodSpec | None = None,
    after: str | None = None,
    stop_at: float | None = None,
) -> None:
    """Run one preparatory stage (its kind's function: ``stage_runner``), writing its output file ``out``; with
    the method's local training settings where the stage carries them (``Stage.protocol``). ``stop_at`` (a
    ``time.time()``): past it the stage stops (``fed.checkpoint.OutOfTime``) and the next call resumes it — its FL run
    (Stage I, a prefix, a tuning point) checkpointed after its current round, a DP-CGAN's clients' state kept."""
    cfg = cfg.with_protocol(stage.protocol, stage.key)

    def engine(method: str | MethodSpec, rounds: int | None = None, **kwargs) -> Engine:
        run_cfg = cfg if rounds is None else dataclasses.replace(cfg, rounds=rounds)
        spec = method if isinstance(method, MethodSpec) else MethodSpec(method, method)
        run_cfg = run_cfg.with_protocol(spec.protocol, spec.name)  # a tuning point's own (MethodSpec.at)
        kwargs = {"work_dir": work_dir, "progress": progress, "stop_at": stop_at} | kwargs
        return make_engine(run_cfg, spec, dataset, data_root, partition_file, seed, threads, **kwargs)

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    job = StageJob(
        stage, dataset, Path(out), lower, engine, method, Path(work_dir), progress, after, cfg.rounds, threads, stop_at
    )
    stage_runner(stage.kind)(job)


def write_history_csv(history: list[dict[str, Any]], path: Path) -> None:
    """One row per round, the scalar metrics as columns in order of first appearance; a metric a round did not
    record, or a non-finite one, is empty (the csv module: the runner does not import pandas)."""
    rows = [{k: v for k, v in row.items() if not isinstance(v, (list, dict))} for row in history]
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns, restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()})


TUNING_RECORDED = ("scores", "tune", "after", "diverged")  # what a tuned cell's metrics.json keeps of its stage


def run_cell(
    cfg: FLConfig,
    method: MethodSpec,
    dataset: str,
    data_root: str | Path,
    partition_file: str | Path,
    seed: int,
    out_dir: str | Path,
    work_dir: str | Path | None = None,
    tracking: dict[str, Any] | None = None,
    threads: int = 1,
    progress: TextIO | None = sys.stderr,
    stages: dict[str, Path] | None = None,
    stop_at: float | None = None,
) -> dict[str, Any]:
    """Train one cell and write its ``metrics.json``, ``history.csv`` and ``model.pt`` to ``out_dir``; resumes from
    ``work_dir``'s checkpoint. ``stop_at`` (a ``time.time()``): past it, the run checkpoints after its current
    round and raises ``fed.engine.OutOfTime`` (``fed campaign``). A cell whose tuning diverged at every point
    trains no round and records that it diverged (before round 1)."""
    method, tuning = tuned(method, stages)
    cfg = cfg.with_protocol(method.protocol, method.name)  # the settings it runs with are the ones recorded
    cell = {
        "dataset": dataset,
        "partition_file": str(partition_file),
        "partition": partition_spec(partition_file),  # what a committed copy of this cell is checked against
        "seed": seed,
        "method": {"name": method.name, "algorithm": method.algorithm, "params": method.params}
        | ({"protocol": method.protocol} if method.protocol else {}),
        "config": cfg.to_dict(),
    }
    if tracking:  # recorded also when not followed live: fed.tracking.log_finished logs the cell from its record
        cell["tracking"] = {
            "experiment": tracking["experiment"],
            "run_name": cell_label(dataset, partition_file, method, seed),
            "tags": tracking.get("tags", {}),
        }
    live = None
    callbacks = {}
    if tracking and tracking.get("live", True):
        from fed.tracking import LiveRun, metrics_digest, run_params

        live = LiveRun(
            tracking["uri"],
            tracking["experiment"],
            cell["tracking"]["run_name"],
            run_params(cell),
            cell["tracking"]["tags"],
        )
        callbacks = {"on_start": live.start, "on_round": live.log_round}
    engine = make_engine(
        cfg,
        method,
        dataset,
        data_root,
        partition_file,
        seed,
        threads,
        work_dir=work_dir,
        progress=progress,
        stages=stages,
        stop_at=stop_at,
        diverged_in_tuning=bool(tuning and tuning.get("diverged")),
        **callbacks,
    )
    previous = (
        signal.signal(signal.SIGTERM, _terminate) if threading.current_thread() is threading.main_thread() else None
    )
    try:
        summary = engine.run()
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        # the final global model (figures invert it), on the CPU so that any machine can read it
        torch.save({k: v.cpu() for k, v in engine.global_state.items()}, out / "model.pt")
        record = {
            **cell,
            "identity": engine.fingerprint(),
            **({"tuning": {k: tuning[k] for k in TUNING_RECORDED if k in tuning}} if tuning else {}),
            **summary,
        }
        tmp = out / "metrics.json.tmp"
        text = json.dumps(json_safe(record), indent=1, allow_nan=False)
        tmp.write_text(text)
        write_history_csv(summary["history"], out / "history.csv")
        tmp.replace(out / "metrics.json")
        if live:
            live.finish(
                summary, [out / "metrics.json", out / "history.csv"], {"fed.metrics_sha256": metrics_digest(text)}
            )
        return record
    except BaseException:
        if live:
            live.fail()  # never left RUNNING by an error or SIGTERM (a SIGKILLed run is resumed next time)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _terminate(signum, frame):
    raise SystemExit(f"terminated by signal {signum}")
