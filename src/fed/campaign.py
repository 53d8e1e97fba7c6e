"""``fed campaign``: spend a machine's minutes on the cells the configs still miss, most valuable first.

Two halves, so that the machine that runs a campaign needs only PyTorch and this package (no Snakemake, MLflow or
jsonschema, as on a lent GPU machine):

- ``plan(configs)``, where the workflow's config can be read (Snakemake installed): every job the configs' tables and
  figures still need — a dataset cache, partitions, preparatory stages, cells, audits (tables with ``audit: true``:
  rule audit's record, read from the cell's model and its jobs' benchmarks, which a campaign's cells and stages write
  as Snakemake's ``benchmark:`` does, ``fed.jobcost``) — as plain data, each with the files it needs first. Value
  decides the order: the configs in the order given, then seed before seed (seed 0 of every cell before seed 1),
  stages before the cells that read them. A cell committed under ``reference_dir`` and current, or finished under
  results_dir, is not planned. ``write_plan`` / ``read_plan`` carry a plan to another machine.
- ``run(plan, minutes, jobs)``, on any machine: the jobs whose inputs exist, ``jobs`` at once, each in a process of
  its own (on a GPU they share it). At the deadline a cell checkpoints after its current round and stops
  (``fed.checkpoint.OutOfTime``), and so does a stage that runs FL rounds (FedDPMS' Stage I, a FedAvg prefix, a
  tuning's running point), and DA-FL's GAN stage, each running client after its current step with its training state
  kept; the next call resumes them. No job starts after the deadline; a round or a client's step in progress
  finishes first, so leave a round's slack (killed instead, a job resumes at its last checkpoint). Outputs land
  where the workflow puts them (``<results_dir>/runs/…``, ``stages/…``, ``partitions/…``): ``snakemake`` then builds
  the tables from them, ``fed export-reference`` commits the cells, and a cell's ``machine`` record says where it
  ran. Campaigns may share a results directory (one per core, plans that overlap): a job runs under an exclusive lock
  on its output (``.<name>.campaign-lock`` beside it, released by the system if the process dies), and a job another
  campaign holds is left to it (``elsewhere``). A campaign that dies, however (``kill -9`` too), takes its workers
  with it once it has gone (``_die_with_campaign``, ``_in_worker``): none goes on writing a job whose lock died with
  its campaign, nor waits for work from it.
"""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path
from typing import Any, NamedTuple, TextIO

PLAN_VERSION = 1
ATTEMPTS = 2  # pools a job may see die under it before it counts as failed
WATCH_EVERY = 0.2  # seconds between a worker's looks at whether its campaign is still its parent


# ---------------------------------------------------------------------------------------------------------- plan
def plan(
    configs: list[list[str]],
    repo: str | Path = ".",
    tables: list[str] | None = None,
    methods: list[str] | None = None,
    partitions: list[str] | None = None,
) -> dict[str, Any]:
    """The jobs that ``configs`` (each a list of overlays, as for ``snakemake --configfile``) still need, in order of
    value — data, partitions, stages, cells, and the audit of each cell of a table with ``audit: true`` (rule
    audit's record, after its cell; a finished cell whose audit is missing gets one where its model is, and is
    listed under ``unaudited`` where it is not); ``tables``: only the cells of these tables and figures (by
    name); ``methods``: only these methods' cells (a swept method: all its grid points); ``partitions``: only
    the cells on these partitions (by name). Needs the workflow's config checks (Snakemake)."""
    from fed.grid import Grid

    jobs: dict[str, dict[str, Any]] = {}
    unaudited: list[str] = []  # cells of audited tables whose audit cannot be planned here
    paces: dict[str, list[dict[str, Any]]] = {}  # algorithm → its finished cells' paces (``status``)
    stage_paces: dict[str, list[dict[str, Any]]] = {}  # stage kind → its finished stages' paces (``status``)
    for rank, overlays in enumerate(configs):
        grid = Grid.from_files(overlays, repo)
        config = grid.config
        wanted = _wanted_cells(grid, tables)
        if methods is not None:
            unknown = set(methods) - set(config["methods"])
            if unknown:
                raise ValueError(f"no method {sorted(unknown)} in the config")
            names = {v for m in methods for v in grid.sweeps.get(m, [m])}
            wanted = [c for c in wanted if c[3] in names]
        if partitions is not None:
            unknown = set(partitions) - set(config["partitions"])
            if unknown:
                raise ValueError(f"no partition {sorted(unknown)} in the config")
            wanted = [c for c in wanted if c[2] in partitions]
        audited = set(_wanted_cells(grid, tables, audited=True))
        reference = config.get("reference_dir")
        export = {"results": grid.results, "reference": reference} if reference else None
        for p, d, part, m, s in sorted(wanted, key=lambda c: c[4]):  # seed 0 first (a stable sort keeps the order)
            out = grid.cell_path(p, d, part, m, s)
            finished = not out.startswith(f"{grid.results}/") or Path(out).exists()  # committed and current, or run
            if finished and (pace := _finished_pace(out)):
                paces.setdefault(grid.algorithm(m), []).append(pace)
            audit = (p, d, part, m, s) in audited and (not finished or _audit_missing(grid, (p, d, part, m, s)))
            if finished and audit and not Path(grid.cell_path(p, d, part, m, s, "model.pt", committed=False)).exists():
                unaudited.append(f"{p}/{d}/{part}/{m}/seed{s}")  # committed without its audit, its model not here
                continue
            if finished and not audit:
                continue
            key = (p, d, part, s)
            needs = _partition_job(jobs, grid, key, (rank, s))
            stages = grid.method_stages(m) or grid.fedavg_prefix_of(key, m)
            paths = {}
            for name, stage in stages.items():
                paths[name] = _stage_job(jobs, grid, grid.stage_key(key, stage), stage.key, (rank, s))
            label = f"{p}/{d}/{part}/{m}/seed{s}"
            if audit:  # rule audit's job: after the cell, from its model and its jobs' benchmarks
                cell = grid.cell_path(p, d, part, m, s, committed=False)
                args = {"metrics": cell, "model": str(Path(cell).with_name("model.pt")), "data_root": grid.data,
                        "partition_file": grid.partition_path(*key), "stages": paths,
                        "benchmark": str(Path(cell).with_name("benchmark.tsv"))}  # fmt: skip
                audit_out = str(Path(cell).with_name("audit.json"))
                jobs[audit_out] = _job("audit", audit_out, [rank, s, 2], [cell, *needs, *paths.values()], args, label)
                jobs[audit_out]["export"] = export
            if finished:
                continue
            spec = config["methods"][m]
            tags = {"paper": grid.cell_paper[(p, d, part, m, s)], "preset": p, "dataset": d, "partition": part}
            tags |= {"method": m, "algorithm": grid.algorithm(m), "seed": str(s)}
            args = {
                "preset": grid.preset(p),
                "method": m,
                "method_config": spec,
                "dataset": d,
                "data_root": grid.data,
                "partition_file": grid.partition_path(*key),
                "seed": s,
                "out_dir": str(Path(out).parent),
                "work_dir": f"{grid.results}/work/{p}/{d}/{part}/{m}/seed{s}",  # the train rule's
                "stages": paths,
                "tracking": {"experiment": tags["paper"], "tags": tags, "live": False},  # MLflow: logged later
            }
            jobs[out] = _job("cell", out, [rank, s, 1], [*needs, *paths.values()], args, label)
            jobs[out]["export"] = export  # where ``run(export=True)`` commits it: the config's reference_dir
        _add_config_paces(paces, grid, {j["args"]["tracking"]["tags"]["algorithm"] for j in jobs.values()
                                        if j["kind"] == "cell"})  # fmt: skip
        _add_stage_paces(stage_paces, grid, {j["args"]["stage"]["kind"] for j in jobs.values() if j["kind"] == "stage"})
    ordered = sorted(jobs.values(), key=lambda j: j["rank"])
    header = {"version": PLAN_VERSION, "configs": configs, "tables": tables, "methods": methods}
    plan_ = header | {"partitions": partitions, "jobs": ordered, "unaudited": unaudited, "paces": paces}
    return plan_ | {"stage_paces": stage_paces}


def _finished_pace(out: str) -> dict[str, Any] | None:
    """A finished cell's pace, which paces its algorithm's cells to run where none of them has one yet (``status``):
    its median round's seconds, its rounds and the kind of machine it ran on (``fed.provenance.kind``)."""
    from fed.provenance import kind

    try:
        record = json.loads(Path(out).read_text())
        if not (pace := _median_round(record["history"])):
            return None
        return {"cell": out, "pace": pace, "rounds": record["rounds_completed"], "machine": kind(record)}
    except (OSError, ValueError, KeyError, TypeError):  # not a record this code writes
        return None


def _add_config_paces(paces: dict[str, list[dict[str, Any]]], grid, algorithms: set[str]) -> None:
    """The paces of the config's other finished cells (of its tables and figures the plan left out) of the
    ``algorithms`` it has cells of to run, marked ``planned: False``: ``status`` falls back on them where none of the
    plan's own finished cells of the algorithm ran on its kind of machine (a seed study's Dir(0.05) cells, whose
    seed 0 ran on another CPU, paced by its 1-Label and 2-Label cells run here)."""
    seen = {pace["cell"] for ps in paces.values() for pace in ps}  # the plan's own
    for cell in dict.fromkeys(_wanted_cells(grid, None)):
        if (algorithm := grid.algorithm(cell[3])) not in algorithms:
            continue
        out = grid.cell_path(*cell)
        finished = not out.startswith(f"{grid.results}/") or Path(out).exists()
        if out not in seen and finished and (pace := _finished_pace(out)):
            paces.setdefault(algorithm, []).append(pace | {"planned": False})
            seen.add(out)


def _add_stage_paces(stage_paces: dict[str, list[dict[str, Any]]], grid, kinds: set[str]) -> None:
    """The paces of the config's finished stages of ``kinds`` (the plan's stages'), which pace its stages of a kind
    before they have a pace of their own (``status``): DA-FL's GAN stages by their clients' DP-SGD steps
    (``_gan_stage_paces``), stages whose file is their FL run's checkpoint (FedDPMS' Stage I, a FedAvg prefix) by
    their rounds (``_checkpoint_stage_pace``)."""
    seen = {pace["stage"] for paces in stage_paces.values() for pace in paces}
    for key, stages in grid.stages.items():
        for stage in stages.values():
            out = grid.stage_path(*key, stage)
            if stage.kind not in kinds or out in seen or not Path(out).exists():
                continue
            if found := _gan_stage_paces(out) if stage.kind == "dp_cgan" else _checkpoint_stage_pace(out):
                stage_paces.setdefault(stage.kind, []).extend(found)
            seen.add(out)


def _checkpoint_stage_pace(out: str) -> list[dict[str, Any]]:
    """A finished stage whose file is its FL run's checkpoint: its median round's seconds, its rounds and the kind of
    machine they ran on (``fed.provenance.kind`` of the checkpoint's ``machines``); none for another stage's file (a
    model, a tuning's choice)."""
    import torch

    from fed.provenance import kind

    try:
        ckpt = torch.load(out, weights_only=False, map_location="cpu", mmap=True)
        history, rounds, machines = ckpt["history"], ckpt["round"], ckpt.get("machines") or [{}]
    except (OSError, pickle.UnpicklingError, EOFError, RuntimeError, KeyError, TypeError):
        return []
    if not (pace := _median_round(history)):
        return []
    where = kind({"machine": machines[-1] | ({"earlier": machines[:-1]} if len(machines) > 1 else {})})
    return [{"stage": out, "pace": pace, "rounds": rounds, "machine": where}]


def _gan_stage_paces(out: str) -> list[dict[str, Any]]:
    """A finished GAN stage's paces, one for each kind of machine its clients ran on (``fed.provenance.kind`` of the
    machine each client's record names; ``not recorded`` for clients trained before they named one): its median
    client's seconds a DP-SGD step there, and those clients' steps."""
    from fed.provenance import kind

    by_kind: dict[str, list[dict[str, Any]]] = {}
    for c in _stage_clients(out) or []:
        if c.get("steps"):
            by_kind.setdefault(kind(c), []).append(c)
    return [{"stage": out, "pace": _median_client(cs), "steps": sum(c["steps"] for c in cs), "machine": k}
            for k, cs in by_kind.items()]  # fmt: skip


def _stage_clients(out: str) -> list[dict[str, Any]] | None:
    """A finished GAN stage's client records (steps, seconds, ε, machine; generators memory-mapped, not read);
    None for a file that is not a stage this code writes."""
    import torch

    try:
        return torch.load(out, weights_only=False, map_location="cpu", mmap=True)["clients"]
    except (OSError, pickle.UnpicklingError, EOFError, RuntimeError, KeyError, TypeError):
        return None


def _median_client(clients: list[dict[str, Any]]) -> float | None:
    """The median client's seconds a DP-SGD step (a client paused while it trained does not set it); None
    without a client that stepped."""
    paces = [c["seconds"] / c["steps"] for c in clients if c["steps"]]
    return statistics.median(paces) if paces else None


def _audit_missing(grid, cell: tuple) -> bool:
    """Whether a finished cell lacks its audit: none committed with it, and none under results_dir as new as its
    record (a cell run again since, as Snakemake's mtimes would say; committed copies carry no such order)."""
    path = Path(grid.cell_path(*cell, "audit.json"))
    if not str(path).startswith(f"{grid.results}/"):
        return False
    metrics = Path(grid.cell_path(*cell, committed=False))
    return not path.exists() or (metrics.exists() and path.stat().st_mtime < metrics.stat().st_mtime)


def _wanted_cells(grid, tables: list[str] | None, audited: bool = False) -> list[tuple]:
    """The cells of the named tables and figures (all of them without names), in the config's order; with
    ``audited``, those of tables with ``audit: true`` only (their cells get rule audit's record too)."""
    config, cells = grid.config, []
    unknown = set(tables or ()) - set(config["tables"]) - set(config["figures"])
    if unknown:
        raise ValueError(f"no table or figure {sorted(unknown)} in the config")
    for name, table in config["tables"].items():
        if (tables is None or name in tables) and (table.get("audit") or not audited):
            cells += [tuple(c.values()) for c in grid.table_cells(table)]
    for name, fig in config["figures"].items():
        if (tables is None or name in tables) and not audited:
            cells += [tuple(c.values()) for c in grid.figure_cells(fig)]
    return list(dict.fromkeys(cells))


def _job(kind: str, out: str, rank: list, needs: list[str], args: dict[str, Any], label: str = "") -> dict[str, Any]:
    return {"kind": kind, "out": out, "rank": rank, "needs": needs, "label": label or out, "args": args}


def _data_job(jobs, grid, dataset: str) -> str:
    path = grid.data_path(dataset)
    if not Path(path).exists() and path not in jobs:
        config = grid.config
        args = {"dataset": dataset, "root": grid.data, "download": config["download"], "synthetic": config["synthetic"]}
        jobs[path] = _job("data", path, [-1, 0, 0], [], args)
    return path


def _partition_job(jobs, grid, key: tuple, rank: tuple) -> list[str]:
    data, path = _data_job(jobs, grid, key[1]), grid.partition_path(*key)
    if not Path(path).exists() and path not in jobs:
        preset, dataset, partition, seed = key
        args = {"dataset": dataset, "data_root": grid.data, "spec": grid.config["partitions"][partition],
                "preset": grid.preset(preset), "seed": seed, "out": path}  # fmt: skip
        jobs[path] = {
            "kind": "partition",
            "out": path,
            "rank": [*rank, 0],
            "needs": [data],
            "label": path,
            "args": args,
        }
    return [data, path]


def _stage_job(jobs, grid, key: tuple, name: str, rank: tuple) -> str:
    stage = grid.stage(key, name)
    path = grid.stage_path(*key, stage)
    if Path(path).exists() or path in jobs:
        return path
    inputs = grid.stage_inputs(key, name)
    needs = _partition_job(jobs, grid, key, rank)
    if lower := inputs.get("lower"):  # the next-lower stage of its kind, itself a job
        lower_name = next(n for n, s in grid.stages[key].items() if grid.stage_path(*key, s) == lower)
        needs.append(_stage_job(jobs, grid, key, lower_name, rank))
    if before := grid.tuned_after(key, stage):  # tune.after: the tuning whose choice it starts from
        needs.append(_stage_job(jobs, grid, before[0], before[1].key, rank))
    method = grid.stage_method(key, name)
    preset, dataset, partition, seed = key
    args = {
        "stage": {"kind": stage.kind, "params": dict(stage.params)},
        "preset": grid.preset(preset),
        "dataset": dataset,
        "data_root": grid.data,
        "partition_file": inputs["partition"],
        "seed": seed,
        "out": path,
        "work_dir": f"{grid.results}/work/stages/{preset}/{dataset}/{partition}/seed{seed}/{stage.key}",  # the rule's
        "lower": lower,
        "after": inputs.get("after"),
        "method_name": method,
        "method": grid.config["methods"].get(method) if method else None,
    }
    jobs[path] = _job("stage", path, [*rank, 0], needs, args)
    return path


def write_plan(plan_: dict[str, Any], path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(plan_, indent=1))


def read_plan(path: str | Path) -> dict[str, Any]:
    plan_ = json.loads(Path(path).read_text())
    if plan_.get("version") != PLAN_VERSION:
        raise ValueError(f"{path}: a campaign plan of version {plan_.get('version')}, this code reads {PLAN_VERSION}")
    return plan_


# ----------------------------------------------------------------------------------------------------------- run
def run(
    plan_: dict[str, Any],
    minutes: float,
    jobs: int = 1,
    threads: int | None = None,
    log: TextIO = sys.stderr,
    work: Callable[[dict[str, Any], float, int], str] | None = None,
    export: bool = False,
) -> dict[str, list[str]]:
    """Run the plan's jobs for ``minutes``, ``jobs`` at once with ``threads`` each (default: the CPUs shared out).
    Returns the jobs by outcome: done, checkpointed (a cell that ran out of time), failed (with the error), elsewhere
    (another campaign holds its lock), waiting (not started: out of time, or an input failed or runs elsewhere). A
    worker that dies (killed, out of memory) takes the pool's other jobs with it: they start again in a new pool
    (they resume from their checkpoints), and a job that was running when ``ATTEMPTS`` pools died fails. A free
    slot takes the first ready job in the plan's order, but a cell before a stage: a cell's metrics can be committed
    (``fed export-reference``) and a stage's weights cannot, so a campaign that runs out of time, or a machine that
    does not keep its files, loses less. ``export``: each cell, once done (and again once its audit is), is copied
    to its config's ``reference_dir`` (``fed.export``), ready to commit; a cell whose config has none is an error
    before any job starts. ``work``: what a worker runs (``run_job``; tests replace it)."""
    work = work or run_job
    stop_at = time.time() + 60 * minutes
    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    pending = [j for j in plan_["jobs"] if not Path(j["out"]).exists()]
    made = {j["out"] for j in pending}
    missing = sorted({n for j in pending for n in j["needs"] if n not in made and not Path(n).exists()})
    if missing:
        raise ValueError(f"inputs neither planned nor present: {missing} (plan again where they are, or copy them)")
    if export and (nowhere := [j["label"] for j in pending if j["kind"] in ("cell", "audit") and not j.get("export")]):
        raise ValueError(f"--export: no reference_dir for {len(nowhere)} cells (the first: {nowhere[0]}): their config "
                         "sets none, or the plan was written before plans recorded it (plan again)")  # fmt: skip
    outcome: dict[str, list[str]] = {"done": [], "checkpointed": [], "failed": [], "elsewhere": [], "waiting": []}
    claims: dict[str, Any] = {}  # output -> the open, locked lock file of a job this campaign runs
    failed: set[str] = set()
    running: dict[Any, dict] = {}
    attempts: dict[str, int] = {}
    started = time.time()

    def say(msg: str) -> None:
        total = len(pending) + sum(map(len, outcome.values())) + len(running)
        done = len(outcome["done"])
        print(f"[campaign {time.time() - started:6.0f} s, {done}/{total} done] {msg}", file=log, flush=True)

    def fail(job: dict[str, Any], why: str) -> None:
        failed.add(job["out"])
        outcome["failed"].append(f"{job['label']}: {why}")
        say(f"FAILED {job['label']}: {why}")

    def new_pool() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            jobs, mp_context=get_context("spawn"), initializer=_die_with_campaign, initargs=(os.getpid(),)
        )

    pool = new_pool()
    try:
        while pending or running:
            blocked = [j for j in pending if any(n in failed for n in j["needs"])]
            for j in blocked:  # an input failed: never runnable in this call
                pending.remove(j)
                failed.add(j["out"])
                outcome["waiting"].append(j["label"])
            ready = [j for j in pending if all(Path(n).exists() for n in j["needs"])]
            ready.sort(key=lambda j: j["kind"] == "stage")  # a ready cell before a stage (the note at run)
            while ready and len(running) < jobs and time.time() < stop_at:
                job = ready.pop(0)
                pending.remove(job)
                if (claim := _claim(job["out"])) is None:
                    outcome["elsewhere"].append(job["label"])
                    say(f"{job['label']} runs in another campaign: left to it")
                    continue
                if Path(job["out"]).exists():  # another campaign finished it since the plan was read
                    _release(job["out"], claim)
                    outcome["done"].append(job["label"])
                    continue
                claims[job["out"]] = claim
                running[pool.submit(_in_worker, work, job, stop_at, threads)] = job
                say(f"start {job['kind']} {job['label']}")
            if not running:
                break  # out of time, or nothing runnable
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            if any(isinstance(f.exception(), BrokenProcessPool) for f in finished):  # a worker died: the pool too
                lost = list(running.values())
                running.clear()
                for job in lost:  # claimed again when it restarts
                    _release(job["out"], claims.pop(job["out"]))
                pool.shutdown(wait=True, cancel_futures=True)
                pool = new_pool()
                for job in lost:
                    attempts[job["out"]] = attempts.get(job["out"], 0) + 1
                    if attempts[job["out"]] >= ATTEMPTS:
                        fail(job, f"its worker died {ATTEMPTS} times (killed, or out of memory?)")
                    else:
                        pending.insert(0, job)
                        say(f"a worker died; {job['label']} starts again")
                continue
            for future in finished:
                job = running.pop(future)
                _release(job["out"], claims.pop(job["out"]))
                try:
                    status = future.result()
                except Exception as err:  # the job's own error: recorded, the campaign goes on
                    fail(job, f"{type(err).__name__}: {err}")
                    continue
                outcome[status].append(job["label"])
                say(f"{status} {job['kind']} {job['label']}")
                if export and status == "done" and job.get("export"):
                    say(_export(job))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for out, claim in claims.items():
            _release(out, claim)
    outcome["waiting"] += [j["label"] for j in pending]
    pending.clear()  # counted as waiting now, not twice in the last line's total
    say(
        f"stopped: {len(outcome['done'])} done, {len(outcome['checkpointed'])} checkpointed, "
        f"{len(outcome['failed'])} failed, {len(outcome['elsewhere'])} elsewhere, {len(outcome['waiting'])} waiting"
    )
    return outcome


def _export(job: dict[str, Any]) -> str:
    """A done cell (or its audit) copied to its config's reference_dir; what happened, in words. A failed copy is
    said, not raised: the cell stays done in results_dir, and ``fed export-reference`` can copy it later."""
    from fed.export import export_reference

    results, reference = Path(job["export"]["results"]), Path(job["export"]["reference"])
    cell = str(Path(job["out"]).parent.relative_to(results / "runs"))
    try:
        export_reference(results, reference, [cell])
    except (OSError, ValueError) as err:
        return f"NOT EXPORTED {job['label']}: {type(err).__name__}: {err}"
    return f"exported {job['label']} to {reference} (to commit)"


_CAMPAIGN: int | None = None  # in a worker: its campaign's pid


def _die_with_campaign(campaign: int) -> None:
    """A worker's first act: watch its campaign, and SIGTERM itself once the campaign has gone. An orphaned worker
    would go on training a cell whose lock died with the campaign, and the next campaign would start the same cell
    beside it. SIGTERM ends a cell as a terminated job (``fed.runner``): its last checkpoint stays, and the next
    campaign resumes it. The watch is the parent pid, which changes only once the campaign's last thread has exited;
    Linux's parent-death signal (``PR_SET_PDEATHSIG``) fires instead at each of its threads' exits, while the
    campaign is still the parent, so the job it ended could not tell a dying campaign from a living one."""
    global _CAMPAIGN
    _CAMPAIGN = campaign

    def watch() -> None:
        while os.getppid() == campaign:
            time.sleep(WATCH_EVERY)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="campaign-watch", daemon=True).start()


def _in_worker(work: Callable[..., str], *args: Any) -> str:
    """A job in a pool worker. A job that outlives its campaign ends the worker: ``fed.runner`` turns the SIGTERM of
    the campaign's death into SystemExit, which the pool would hand back as the job's outcome to nobody and then
    keep the worker waiting for work from a campaign that is gone."""
    try:
        return work(*args)
    finally:
        if os.getppid() != _CAMPAIGN:
            os._exit(1)


def _lock_path(out: str) -> Path:
    return Path(out).with_name(f".{Path(out).name}.campaign-lock")


def _claim(out: str):
    """The job's lock, held (an open file under ``flock``), or None when another process holds it."""
    path = _lock_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w")  # noqa: SIM115 — held until _release
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _release(out: str, handle) -> None:
    """Remove the lock file, then unlock: a campaign that opens it afterwards locks a new file and finds the output."""
    _lock_path(out).unlink(missing_ok=True)
    handle.close()


def run_job(job: dict[str, Any], stop_at: float, threads: int) -> str:
    """One job, in a worker process: "done", or "checkpointed" for a cell or a stage out of time. A finished cell or
    stage leaves its cost where rule train's and rule stage's ``benchmark:`` would (that of its last segment, as
    Snakemake's of its last job), which the audit reads."""
    if job["kind"] in ("cell", "stage"):  # their cost, as Snakemake's benchmark: files (fed.jobcost)
        from fed.jobcost import JobMeter

        with JobMeter() as meter:
            status = _run_job(job, stop_at, threads)
        if status == "done":
            out = Path(job["out"])
            meter.write(out.with_name("benchmark.tsv") if job["kind"] == "cell" else out.with_suffix(".benchmark.tsv"))
        return status
    return _run_job(job, stop_at, threads)


def _run_job(job: dict[str, Any], stop_at: float, threads: int) -> str:
    from fed.checkpoint import OutOfTime
    from fed.config import FLConfig, MethodSpec

    a = job["args"]
    if job["kind"] == "data":
        from fed.data.datasets import prepare

        prepare(a["dataset"], a["root"], a["download"], a["synthetic"])
    elif job["kind"] == "partition":
        from fed.data.partition import write_partition

        write_partition(a["dataset"], a["data_root"], a["spec"], a["preset"], a["seed"], a["out"])
    elif job["kind"] == "audit":
        from fed.leakage import audit_files

        stages = {k: Path(v) for k, v in a["stages"].items()}
        record = audit_files(a["metrics"], a["model"], a["data_root"], a["partition_file"], stages, threads,
                             a["benchmark"])  # fmt: skip
        tmp = Path(job["out"]).with_name("audit.json.tmp")
        tmp.write_text(json.dumps(record, indent=1, allow_nan=False))
        tmp.replace(job["out"])
    elif job["kind"] == "stage":
        from fed.runner import run_stage
        from fed.stages import Stage

        # A campaign takes an output that exists for done, so a stage writes its file beside it and renames it: a kill
        # mid-write leaves no torn stage for the next call to read (Snakemake marks such an output incomplete itself).
        part = Path(job["out"]).with_name(Path(job["out"]).name + ".part")
        try:
            with _log(job) as progress:
                run_stage(
                    Stage.of(a["stage"]["kind"], **a["stage"]["params"]),
                    FLConfig.from_preset(a["preset"], a["dataset"]),
                    a["dataset"],
                    a["data_root"],
                    a["partition_file"],
                    a["seed"],
                    part,
                    a["work_dir"],
                    lower=a["lower"],
                    after=a.get("after"),
                    threads=threads,
                    progress=progress,
                    method=MethodSpec.from_config(a["method_name"], a["method"]) if a["method"] else None,
                    stop_at=stop_at,
                )
        except OutOfTime:  # its FL run checkpointed, or a DP-CGAN's clients' state kept
            return "checkpointed"
        part.replace(job["out"])
    else:
        from fed.runner import run_cell
        from fed.tracking import git_commit

        tracking = dict(a["tracking"])
        tracking["tags"] = dict(tracking["tags"], git_commit=git_commit(Path(__file__).parent))
        try:
            with _log(job) as progress:
                run_cell(
                    FLConfig.from_preset(a["preset"], a["dataset"]),
                    MethodSpec.from_config(a["method"], a["method_config"]),
                    a["dataset"],
                    a["data_root"],
                    a["partition_file"],
                    a["seed"],
                    a["out_dir"],
                    work_dir=a["work_dir"],
                    tracking=tracking,
                    threads=threads,
                    progress=progress,
                    stages={k: Path(v) for k, v in a["stages"].items()},
                    stop_at=stop_at,
                )
        except OutOfTime:
            return "checkpointed"
    return "done"


# -------------------------------------------------------------------------------------------------------- status
def status(plan_: dict[str, Any]) -> list[dict[str, Any]]:
    """Where each of the plan's jobs stands, read from the files (it starts, locks and changes nothing, so it may run
    beside the campaigns): ``state`` — done, running (a campaign holds its lock: ``pid``), paused (that campaign is
    stopped, ``kill -STOP``: it holds the job and does not run it), stopped (partly done,
    nobody running it), ready (its inputs exist) or waiting (for an input); ``progress`` in words; ``spent`` — the
    seconds its finished part took; ``left`` — its work left (a cell's rounds, not those of the stage it warm-starts
    from; a GAN stage's DP-SGD steps) at its own pace so far (a cell's median round, a stage's median client's
    seconds a step, a client with a kept state at its last stretch's: a campaign paused with ``kill -STOP`` stops
    the clock of one round, or of the clients it runs until their next kept state, not the pace), and for a job
    without a pace of its
    own (``estimated``) at its kind's pace (cells of its algorithm, stages of its kind: their paces weighted by their
    rounds or steps; cells with none in the plan, at the pace of its algorithm's finished cells the plan skipped
    that ran on this kind of machine, or where none did, of the config's other finished cells of it that did:
    ``plan``'s ``paces``; stages with none in the plan, at the config's finished ones of their kind that ran on this
    kind of machine — DA-FL's GAN stages, their clients that did; FedDPMS' Stage I, a FedAvg prefix, their rounds:
    ``stage_paces``); a cell whose algorithm has no pace here, at another algorithm's pace here times their ratio on
    a machine where both ran (``_scaled_pace``; ``scaled`` says which); or where its work is not known yet (a stage
    whose partition is not written) the mean time of its kind's timed jobs; None where there are none; ``summed`` — a
    DA-FL GAN stage, whose seconds are its clients', each on one thread, summed (it trains ``--threads`` of them at
    once).
    Progress is read for cells (their checkpoint or record), stages that run FL rounds (their runs' checkpoints:
    ``fed.runner.stage_runs``) and DA-FL's GAN stages (their clients' files)."""
    rows, found = [], []
    stages = {job["out"]: job for job in plan_["jobs"] if job["kind"] == "stage"}
    for job in plan_["jobs"]:
        done = Path(job["out"]).exists()
        pid = None if done else _holder(job["out"])
        found.append(p := _progress(job, done, running=pid is not None, stages=stages))
        if done:
            state = "done"
        elif pid is not None:
            state = f"{'paused' if _paused(pid) else 'running'} (pid {pid})"
        elif p.spent is not None:
            state = "stopped"
        else:
            state = "ready" if all(Path(n).exists() for n in job["needs"]) else "waiting"
        left = 0.0 if done else p.left()
        rows.append({"job": job["label"], "kind": job["kind"], "state": state, "progress": p.words,
                     "spent": p.spent, "left": left, "estimated": False,
                     "summed": _kind_of(job) == ("stage", "dp_cgan")})  # fmt: skip
    paced: dict[tuple[str, str], list[tuple[float, int]]] = {}  # kind → (seconds, work) of its paced jobs
    whole: dict[tuple[str, str], list[float]] = {}  # kind → a timed job's whole time
    for job, row, p in zip(plan_["jobs"], rows, found, strict=True):
        if p.rate() is not None:
            paced.setdefault(_kind_of(job), []).append((p.rate() * p.done, p.done))
        if row["spent"] is not None and row["left"] is not None:
            whole.setdefault(_kind_of(job), []).append(row["spent"] + row["left"])
    cell_paces = plan_.get("paces", {})
    finished = _finished_paces(cell_paces, plan_.get("stage_paces", {}))
    here = {kind: _per_unit(paced.get(kind) or finished[kind]) for kind in paced.keys() | finished.keys()}
    for job, row, p in zip(plan_["jobs"], rows, found, strict=True):
        if row["left"] is not None or row["state"] == "done":
            continue
        kind = _kind_of(job)
        if p.todo is not None and kind in here:
            row["left"] = here[kind] * p.todo
        elif p.todo is not None and kind[0] == "cell" and (scaled := _scaled_pace(kind[1], here, cell_paces)):
            row["left"], row["scaled"] = scaled[0] * p.todo, scaled[1]
        elif row["spent"] is None and (times := whole.get(kind)):
            row["left"] = sum(times) / len(times)
        row["estimated"] = row["left"] is not None
    return rows


def _finished_paces(
    paces: dict[str, list[dict[str, Any]]], stage_paces: dict[str, list[dict[str, Any]]] | None = None
) -> dict[tuple[str, str], list[tuple[float, int]]]:
    """``plan``'s ``paces`` of finished cells and ``stage_paces`` of finished stages as ``status`` weighs paces:
    kind → (seconds, rounds or steps), of those that ran on this kind of machine (another CPU kernel set or model,
    or a GPU, runs at another pace): the cells of the plan's own tables, or where none of them ran here, the
    config's other cells (``planned: False``); the config's GAN stages, each of their clients that ran here."""
    if not paces and not stage_paces:
        return {}
    from fed.device import resolve_device
    from fed.provenance import kind, machine

    here = kind({"machine": machine(resolve_device("auto"))})
    found = {}
    for alg, ps in paces.items():
        local = [p for p in ps if p["machine"] == here]
        own = [p for p in local if p.get("planned", True)] or local
        if own:
            found["cell", alg] = [(p["pace"] * p["rounds"], p["rounds"]) for p in own]
    for stage_kind, ps in (stage_paces or {}).items():  # their work: a GAN stage's steps, an FL stage's rounds
        work = [(p["pace"], p["steps"] if "steps" in p else p["rounds"]) for p in ps if p["machine"] == here]
        if local := [(pace * n, n) for pace, n in work]:
            found["stage", stage_kind] = local
    return found


def _scaled_pace(
    algorithm: str, here: dict[tuple[str, str], float], paces: dict[str, list[dict[str, Any]]]
) -> tuple[float, str] | None:
    """An algorithm's seconds a round on this kind of machine where none of its cells has a pace here: another
    algorithm's seconds a round here (``here``, as ``status`` weighs them) times the ratio of the two algorithms'
    paces on a machine where both have finished cells (``plan``'s ``paces``) — FedProx on a CPU at FedAvg's pace
    there times FedProx's over FedAvg's on the H200 — with the words that say so; of several such pairs, the one whose
    two algorithms ran the most rounds on that machine. None without one."""

    def by_machine(alg: str) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for p in paces.get(alg, []):
            found.setdefault(p["machine"], []).append(p)
        return found

    def mean(ps: list[dict[str, Any]]) -> float:  # seconds a round, weighted by rounds
        return _per_unit([(p["pace"] * p["rounds"], p["rounds"]) for p in ps])

    mine, pairs = by_machine(algorithm), []
    for (kind, other), pace in here.items():
        theirs = by_machine(other) if kind == "cell" and other != algorithm else {}
        for m in mine.keys() & theirs.keys():
            rounds = sum(p["rounds"] for p in mine[m] + theirs[m])
            pairs.append((-rounds, other, m, pace, mine[m], theirs[m]))
    if not pairs:
        return None
    _, other, m, pace, mine_there, theirs_there = min(pairs, key=lambda pair: pair[:3])
    ratio = mean(mine_there) / mean(theirs_there)
    return pace * ratio, f"{algorithm}: at {other}'s pace here × {ratio:.2f} ({algorithm}'s over {other}'s on {m})"


def _per_unit(work: list[tuple[float, int]]) -> float:
    """Seconds a round or a step of jobs' (seconds, rounds or steps): their seconds over their work."""
    return sum(t for t, _ in work) / sum(n for _, n in work)


def _kind_of(job: dict[str, Any]) -> tuple[str, str]:
    """What a job's time is estimated from: cells of the same algorithm, stages of the same kind."""
    if job["kind"] == "cell":
        return "cell", job["args"].get("tracking", {}).get("tags", {}).get("algorithm", "")
    return job["kind"], job["args"].get("stage", {}).get("kind", "")


class _Progress(NamedTuple):
    words: str = ""
    spent: float | None = None  # seconds its finished part took
    done: int | None = None  # its work done: a cell's rounds, a GAN stage's DP-SGD steps
    todo: int | None = None  # its work left, where known
    pace: float | None = None  # seconds a unit of its work, where measured more robustly than spent / done

    def rate(self) -> float | None:
        """Its seconds a round or a step; None before any is done."""
        if self.pace is not None:
            return self.pace
        return self.spent / self.done if self.spent is not None and self.done else None

    def left(self) -> float | None:
        """Seconds left at its own pace; None without one."""
        return None if self.rate() is None or self.todo is None else self.rate() * self.todo


def _median_round(history: list[dict[str, Any]]) -> float | None:
    """A cell's seconds a round: the median of its rounds' (one paused round does not move it)."""
    seconds = [r["seconds"] for r in history if "seconds" in r]
    return statistics.median(seconds) if seconds else None


def _progress(
    job: dict[str, Any], done: bool, running: bool = False, stages: dict[str, dict[str, Any]] | None = None
) -> _Progress:
    """A cell's progress from its record or checkpoint, a stage's from its FL runs' checkpoints, a DP-CGAN stage's
    from its record or its clients' files; a job with nothing kept has only its work to do, where it is known (a
    cell's or a stage's rounds, a DP-CGAN stage's steps; a cell's rounds after those of the stage it warm-starts from:
    ``_warm_rounds`` of the plan's ``stages``, by output). ``running``: its FL runs' rounds past their checkpoints
    count too (``rounds.json``); a stopped job resumes from its checkpoints, so only they count."""
    a, work = job["args"], Path(job["args"].get("work_dir") or "/nonexistent")
    if job["kind"] == "cell":
        if done:
            try:
                last = json.loads(Path(job["out"]).read_text())
                acc, rounds = last["last"]["global_acc"], last["rounds_completed"]
                words = (
                    f"diverged in round {last['diverged_round']}"
                    if last["diverged"]
                    else f"round {rounds}, {acc:.2f} %"
                )
                return _Progress(words, last["wall_seconds"], rounds, 0, _median_round(last.get("history", [])))
            except (ValueError, KeyError, TypeError):  # not a record this code writes: done, nothing more to say
                return _Progress()
        from fed.config import FLConfig

        total = FLConfig.from_preset(a["preset"], a["dataset"]).rounds if "preset" in a else None
        progress = _runs_progress([(work, total)], running)
        if progress.spent is None and progress.todo is not None:  # not started: it starts where its warm start ends
            progress = progress._replace(todo=progress.todo - _warm_rounds(job, stages or {}))
        return progress
    if job["kind"] == "stage" and a["stage"]["kind"] == "dp_cgan":
        return _gan_progress(job, done, work)
    if job["kind"] == "stage" and not done and (runs := _stage_runs(a, work)) is not None:
        return _runs_progress(runs, running)
    return _Progress()


def _warm_rounds(job: dict[str, Any], stages: dict[str, dict[str, Any]]) -> int:
    """The rounds a cell does not train itself: those of the stage it continues from (``warm``: a FedAvg prefix,
    FedDPMS' Stage I; ``Engine.load_warm_start``), read from the plan's job for it, or where the plan has none (the
    stage is done) from its file, a run's last checkpoint; 0 without one."""
    path = job["args"].get("stages", {}).get("warm")
    if path in stages:
        return stages[path]["args"]["stage"]["params"].get("rounds", 0)
    if path is None or not Path(path).exists():
        return 0
    import torch

    return torch.load(path, weights_only=False, map_location="cpu").get("round", 0)


def _stage_runs(a: dict[str, Any], work: Path) -> list[tuple[Path, int]] | None:
    """A stage's FL runs (work dir, rounds), as ``fed.runner.stage_runs`` lists them; None for a method's stage."""
    from fed.config import FLConfig, MethodSpec
    from fed.runner import stage_runs

    rounds = FLConfig.from_preset(a["preset"], a["dataset"]).rounds
    method = MethodSpec.from_config(a["method_name"], a["method"]) if a.get("method") else None
    return stage_runs(a["stage"]["kind"], a["stage"]["params"], rounds, method, work)


def _runs_progress(runs: list[tuple[Path, int | None]], running: bool = False) -> _Progress:
    """Progress of FL runs from their checkpoints (``work/checkpoint.pt``), and while ``running`` from the rounds
    each has run past its checkpoint (``work/rounds.json``, ``fed.engine``): one run's round (its accuracy there,
    and its checkpoint's round where that is behind), or the rounds done of all of them; the pace is their rounds'
    median."""
    import torch

    from fed.engine import ROUNDS_FILE

    found = []
    for work, total in runs:
        kept = work / "checkpoint.pt"
        ckpt = torch.load(kept, weights_only=False, map_location="cpu") if kept.exists() else None
        live = json.loads((work / ROUNDS_FILE).read_text()) if running and (work / ROUNDS_FILE).exists() else None
        if live is not None and live["round"] > (ckpt["round"] if ckpt else 0):
            found.append((live | {"kept": ckpt["round"] if ckpt else 0}, total))
        elif ckpt is not None:
            found.append((ckpt, total))
    totals = [t for _, t in runs]
    todo = None if None in totals else sum(totals)
    if not found:
        return _Progress(todo=todo)
    rounds = sum(c["round"] for c, _ in found)
    if len(runs) == 1:
        [(ckpt, total)] = found
        acc = ckpt["history"][-1].get("global_acc") if ckpt["history"] else None
        words = f"round {rounds}/{total}" + (f", {acc:.2f} % there" if acc is not None else "")
        if "kept" in ckpt:
            words += f" (checkpoint: round {ckpt['kept']})" if ckpt["kept"] else " (no checkpoint yet)"
    else:
        words = f"{rounds}/{todo} rounds of {len(runs)} runs"
    spent = sum(c["wall_seconds"] for c, _ in found)
    pace = _median_round([r for c, _ in found for r in c["history"]])
    return _Progress(words, spent, rounds, None if todo is None else todo - rounds, pace)


def _gan_progress(job: dict[str, Any], done: bool, work: Path) -> _Progress:
    """A DA-FL GAN stage: its clients finished and the step each stopped one kept, against the steps each client's
    schedule and budget allow (``PSGSettings.steps`` of its training split's size); its pace, done or not, is its
    median client's seconds a step."""
    from fed.dpgan import PSGSettings
    from fed.gan_stage import stage_progress

    if done:
        if (clients := _stage_clients(job["out"])) is None:  # not a stage this code wrote
            return _Progress()
        steps = sum(c["steps"] for c in clients)
        words, spent = f"{len(clients)} clients, {steps:,} steps", sum(c["seconds"] for c in clients)
        return _Progress(words, spent, steps, 0, _median_client(clients))
    if not Path(partition := job["args"]["partition_file"]).exists():
        return _Progress()
    settings = PSGSettings.from_params(job["args"]["stage"]["params"])
    sizes = [len(c["train"]) for c in json.loads(Path(partition).read_text())["clients"]]
    found = stage_progress(work, settings) if work.is_dir() else {"finished": {}, "kept": {}}
    finished, kept = found["finished"], found["kept"]
    budget = {k: finished[k]["steps"] if k in finished else settings.steps(n)[3] for k, n in enumerate(sizes)}
    steps = sum(r["steps"] for r in finished.values()) + sum(r["step"] for r in kept.values())
    todo = sum(budget.values()) - steps
    if not finished and not kept:
        return _Progress(todo=todo)
    words = [f"{len(finished)}/{len(sizes)} clients"]
    words += [f"client {k} at step {r['step']}/{budget[k]}" for k, r in sorted(kept.items())]
    words += [f"{steps:,}/{sum(budget.values()):,} steps"]
    paces = [r["seconds"] / r["steps"] for r in finished.values() if r["steps"]]
    paces += [r["pace"] if "pace" in r else r["seconds"] / r["step"] for r in kept.values() if r["step"]]
    spent = sum(r["seconds"] for r in [*finished.values(), *kept.values()])
    return _Progress(", ".join(words), spent, steps, todo, statistics.median(paces) if paces else None)


def _holder(out: str) -> int | None:
    """The pid of the campaign whose lock on ``out`` is held now (from /proc/locks, without touching the lock: a
    status read must never make a campaign leave a job "elsewhere"); None where none holds it, or not on Linux."""
    try:
        st = _lock_path(out).stat()
        locks = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in locks:  # "1: FLOCK  ADVISORY  WRITE 7682 fe:00:5579657 0 EOF"
        fields = line.split()
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == inode:
            return int(fields[4])
    return None


def _paused(pid: int) -> bool:
    """Whether process ``pid`` is stopped (``kill -STOP``; Linux, else False)."""
    try:  # "7682 (python) T 1 …": the state follows the command's closing parenthesis
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


GAN_HOURS = (
    "(a GAN stage's hours are its clients' summed, each on one thread: it trains --threads of them at once, so its "
    "clock time is about its hours over that)"
)


def describe(rows: list[dict[str, Any]]) -> str:
    """``status`` as a table, and a line of jobs per state and the hours left where a pace is measured (a DA-FL GAN
    stage's are its clients' summed, which ``GAN_HOURS`` says below it where one has a measured pace or work)."""
    hours = lambda s: "–" if s is None else f"{s / 3600:.1f} h"  # noqa: E731
    table = [("job", "state", "progress", "spent", "left"), *(
        (r["job"], r["state"], r["progress"], hours(r["spent"]), "≈ " * r["estimated"] + hours(r["left"]))
        for r in rows)]  # fmt: skip
    widths = [max(len(line[i]) for line in table) for i in range(5)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in table]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"].split()[0]] = counts.get(r["state"].split()[0], 0) + 1
    paced = [r["left"] for r in rows if r["left"] is not None and not r["estimated"] and r["state"] != "done"]
    like = [r["left"] for r in rows if r["estimated"]]
    unknown = sum(r["left"] is None for r in rows)
    left = [f"≈ {sum(paced) / 3600:.1f} h left at the pace so far"] if paced else []  # none paced: not "0.0 h left"
    scaled = list(dict.fromkeys(f"≈ {r['scaled']}" for r in rows if r.get("scaled")))
    if like:
        why = "at their kind's pace" + ", or as said below" * bool(scaled)
        left.append(f"≈ {sum(like) / 3600:.1f} h for {_jobs(len(like))} without a pace (≈: {why})")
    if unknown:
        left.append(f"{'and ' * bool(left)}{_jobs(unknown)} with no estimate")
    summary = ", ".join(f"{n} {state}" for state, n in counts.items())
    lines += [f"{summary}; {', '.join(left) or 'nothing left'}", *scaled]
    if any(r.get("summed") for r in rows):
        lines.append(GAN_HOURS)
    return "\n".join(lines)


def _jobs(n: int) -> str:
    return f"{n} job{'s' * (n != 1)}"


def _log(job: dict[str, Any]):
    """The job's progress log, beside the workflow's: logs/campaign/<label>.log."""
    path = Path("logs/campaign") / f"{job['label'].replace('/', '__')}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a")
