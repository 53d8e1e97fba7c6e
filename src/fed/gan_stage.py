"""DA-FL's GAN stage across its clients: which clients still need their GAN, in what order, how many at once, where
each stands, and the process each runs in. The numbers are ``fed.dpgan``'s (one client's PSG from its request); this
module only schedules them, so it is outside every run's identity (``fed.identity``): an edit here reruns no stage
and discards no client's kept state. ``fed.runner.METHOD_STAGES`` loads it for the ``dp_cgan`` stage kind.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from fed import provenance
from fed.checkpoint import OutOfTime, previous
from fed.data.datasets import info as dataset_info
from fed.dpgan import PSGSettings, client_code, client_record, client_request

OUT_OF_TIME = 75  # a client process's exit status when it stopped at ``stop_at`` (EX_TEMPFAIL)


def _save(record: dict[str, Any], path: Path) -> None:
    torch.save(record, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)  # whole or absent: a killed stage resumes at the next unfinished client


def _train(request: dict[str, Any], progress=None) -> dict[str, Any]:
    """One client's PSG (``fed.dpgan.client_record``) and the machine it finished on (``fed.provenance.machine``),
    by which ``fed campaign --status`` paces the stages still to run on the same kind of machine."""
    return client_record(request, progress) | {"machine": provenance.machine(request.get("device", "cpu"))}


def _late(request: dict[str, Any]) -> bool:
    return request.get("stop_at") is not None and time.time() >= request["stop_at"]


def train_clients(
    clients: list[int],
    request: Callable[[int], dict[str, Any]],
    work_dir: Path,
    workers: int = 1,
    progress=None,
) -> None:
    """PSG at each of ``clients``, each written to ``work_dir/client{k}.pt`` as it ends. ``workers`` > 1 trains
    that many clients at once, each in a process of its own with one thread (``python -m fed.gan_stage``; on a GPU
    they share the device, whose small DP-SGD steps leave it idle between launches). Every client draws from its
    own seeded streams, so the stage's output does not depend on ``workers``. A request's ``stop_at`` (a
    ``time.time()``): no client starts after it, and the running ones keep their state (``state``) and stop;
    then ``OutOfTime``."""

    def done(k: int) -> None:
        if progress:
            r = torch.load(work_dir / f"client{k}.pt", weights_only=False, map_location="cpu")
            print(f"  client {k}: {r['steps']}/{r['scheduled_steps']} steps, ε = {r['epsilon']:.3f}, "
                  f"{r['seconds']:.0f} s", file=progress, flush=True)  # fmt: skip

    if workers <= 1 or len(clients) <= 1:
        for k in clients:
            req = request(k)
            if _late(req):
                raise OutOfTime(f"client {k} not started")
            if progress:
                print(f"client {k}: {len(req['y'])} samples", file=progress, flush=True)
            _save(_train(req, progress), work_dir / f"client{k}.pt")
            done(k)
        return

    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])

    def run(k: int) -> int:
        path, req = work_dir / f"client{k}.request.pt", request(k)
        if _late(req):
            raise OutOfTime(f"client {k} not started")
        _save(req, path)
        with open(work_dir / f"client{k}.log", "a") as log:  # a resumed client's log goes on
            cmd = [sys.executable, "-m", "fed.gan_stage", str(path), str(work_dir / f"client{k}.pt")]
            code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        if code == OUT_OF_TIME:
            raise OutOfTime(f"client {k} stopped, its state kept")
        if code:
            tail = (work_dir / f"client{k}.log").read_text()[-3000:]
            raise RuntimeError(f"PSG of client {k} failed (exit {code}); its log ends:\n{tail}")
        path.unlink()
        return k

    if progress:
        print(f"{len(clients)} clients, {workers} at a time (logs: {work_dir}/client*.log)", file=progress, flush=True)
    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(run, k) for k in clients]
        try:
            for future in as_completed(futures):
                done(future.result())
        except BaseException:
            for f in futures:  # the running ones finish and keep their clients; the rest are not started
                f.cancel()
            raise


def current(record: dict[str, Any], settings: PSGSettings | None = None) -> bool:
    """Whether a client's file is progress of its stage: written by this PSG code (``client_code``: another's client
    is trained again) and, where the stage's ``settings`` are given, a finished record of them. A kept state records
    no settings; its key holds them, and ``fed.dpgan.train_psg`` resumes only a state of its own."""
    return record.get("code") == client_code() and (settings is None or record.get("settings") == asdict(settings))


def _client_files(work_dir: Path, kind: str, settings: PSGSettings | None = None):
    """(k, record) of each ``client{k}.pt`` (``kind`` "pt": finished clients) or ``client{k}.state.pt`` ("state.pt":
    kept states) in ``work_dir`` that is ``current``; not requests, nor a state's previous copy."""
    for path in sorted(Path(work_dir).glob(f"client*.{kind}")):
        name = path.name.removeprefix("client").removesuffix(f".{kind}")
        if not name.isdigit():
            continue
        try:
            record = torch.load(path, weights_only=False, map_location="cpu", mmap=True)  # reads its numbers only
        except FileNotFoundError:  # a state removed between the listing and the read: its client has finished
            continue
        if current(record, settings):
            yield int(name), record


def kept_states(work_dir: Path) -> dict[int, dict[str, Any]]:
    """Each client's last kept state: its step, its budget of steps (absent from states kept before it was
    recorded), its seconds so far and, where the state before it (``fed.checkpoint.previous``) is of the same run
    and an earlier step, ``pace``: the seconds a step between the two, the client's last stretch (a pause before
    that stretch, ``kill -STOP``, is in its seconds so far but not in its pace)."""
    found = {}
    for k, r in _client_files(work_dir, "state.pt"):
        found[k] = {f: r[f] for f in ("step", "budget", "seconds") if f in r}
        try:
            before = torch.load(previous(work_dir / f"client{k}.state.pt"), weights_only=False, mmap=True)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError):  # none, or torn: no stretch to time
            continue
        if before.get("key") == r.get("key") and "seconds" in before and before.get("step", r["step"]) < r["step"]:
            found[k]["pace"] = (r["seconds"] - before["seconds"]) / (r["step"] - before["step"])
    return found


def stage_progress(work_dir: Path, settings: PSGSettings | None = None) -> dict[str, dict[int, dict[str, Any]]]:
    """Where a stopped or running stage of ``settings`` stands, from its files (``fed campaign --status``):
    ``finished`` — each finished client's steps, ε and seconds; ``kept`` — each unfinished client's ``kept_states``.
    Only ``current`` files count, as in ``run_stage``."""
    fields = ("steps", "scheduled_steps", "epsilon", "seconds")
    finished = {k: {f: r[f] for f in fields} for k, r in _client_files(work_dir, "pt", settings)}
    return {"finished": finished, "kept": {k: v for k, v in kept_states(work_dir).items() if k not in finished}}


def longest_first(
    clients: list[int], sizes: list[int], settings: PSGSettings, kept: dict[int, dict[str, Any]]
) -> list[int]:
    """``clients`` by their DP-SGD steps left (their budget, ``PSGSettings.steps``, less a kept state's step), most
    first: trained some at a time, they then end about together (Dir(0.05)'s ten clients, 118-1,590 steps, two at a
    time: 3,840 steps of clock in this order, 4,630 in the clients' order). Ties keep their order."""
    left = {k: settings.steps(sizes[k])[3] - kept.get(k, {}).get("step", 0) for k in clients}
    return sorted(clients, key=lambda k: -left[k])


def run_stage(job: Any) -> None:
    """The ``dp_cgan`` stage of a ``fed.runner.StageJob`` (``fed.runner.stage_runner``; not imported here: the
    runner loads this module, not the other way round): DA-FL's PSG (Algorithm 2) at every client, on its own
    training split: one DP-CGAN each, ``job.threads`` clients at a time (``train_clients``), the most steps left
    first (``longest_first``). Writes the generators and each one's DP-SGD steps, ε and seconds; a stopped or
    killed stage resumes each unfinished client from its last kept state (every ``fed.dpgan.STATE_EVERY`` steps, and at
    ``job.stop_at``)."""
    settings = PSGSettings.from_params(dict(job.stage.params))
    ctx = job.engine("fedavg").ctx  # the cell's data, partition and random streams; no FL round is run
    meta = dataset_info(job.dataset)
    job.work_dir.mkdir(parents=True, exist_ok=True)

    def finished(k: int) -> dict[str, Any] | None:
        part = job.work_dir / f"client{k}.pt"
        done = torch.load(part, weights_only=False, map_location="cpu") if part.exists() else None
        return done if done is not None and current(done, settings) else None  # else it is trained again

    def request(k: int) -> dict[str, Any]:
        return client_request(ctx, job.dataset, settings, k, job.work_dir, job.stop_at)

    todo = [k for k in range(ctx.num_clients) if finished(k) is None]
    todo = longest_first(todo, ctx.client_sizes(), settings, kept_states(job.work_dir))
    if job.progress:
        print(f"[{job.stage.key}] {len(todo)} of {ctx.num_clients} clients to train", file=job.progress, flush=True)
    train_clients(todo, request, job.work_dir, job.threads, job.progress)
    clients = [finished(k) for k in range(ctx.num_clients)]
    record = {
        "settings": asdict(settings),
        "dataset": job.dataset,
        "channels": ctx.input_shape[0],
        "num_classes": ctx.num_classes,
        "mean": meta.mean,
        "std": meta.std,
        "clients": [{k: v for k, v in c.items() if k != "settings"} for c in clients],
    }
    torch.save(record, job.out)


if __name__ == "__main__":  # one client of train_clients: python -m fed.gan_stage REQUEST OUT
    torch.set_num_threads(1)
    try:
        _save(_train(torch.load(sys.argv[1], weights_only=False), sys.stdout), Path(sys.argv[2]))
    except OutOfTime:
        sys.exit(OUT_OF_TIME)
