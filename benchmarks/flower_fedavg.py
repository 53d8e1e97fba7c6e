"""Our engine against Flower's simulation engine (issue 27, item 4): one FedAvg cell of the Fed-ZDA FMNIST protocol
timed in both, with the same model, partition, seeds, rounds and local training, and whether the accuracies agree.

    python benchmarks/flower_fedavg.py --rounds 5 10 --seeds 0 1 2 --data-root data

The protocol is the ``fedzda`` preset as config/fmnist.yaml resolves it (config.yaml + config/papers/fedzda.yaml):
100 clients, 10 % per round, E = 5, B = 10, plain SGD at lr 0.02, ``cnn_mnist``, arithmetic-mean aggregation, on
Fed-ZDA's ``unimodal`` partition (McMahan's shards, 2 per client), built by ``fed.data.partition.make_partition``
exactly as the ``partition`` rule builds it (seed = the run's seed). Every client holds 480 training samples, so
the mean and the sample-weighted mean coincide.

- **ours**: ``fed.runner.make_engine`` (the engine the ``train`` rule's ``run_cell`` runs) with FedAvg, one torch
  thread, evaluation only after the last round, no checkpoints.
- **Flower**: ``flwr.simulation.run_simulation`` (Flower 1.42's message API: ``ServerApp`` with
  ``flwr.serverapp.strategy.FedAvg``, ``fraction_train`` = 0.1, ``ClientApp`` with a ``@train`` function), Ray
  backend with one CPU and one actor (a client's local training uses one torch thread, as ours). One SuperNode per
  client; node ``partition-id`` k trains on client k of the same partition. The global model starts from the same
  weights (``fed.context.Context`` seeds the initialisation); local training is ``fed.training.local_sgd`` through
  ``Context.train`` — cross-entropy, the preset's SGD, B and E, batches drawn from the same seeded stream
  ``rng("shuffle", round, client)`` — so the two frameworks differ in orchestration only. The final global model is
  evaluated server-side with ``fed.evaluation.evaluate`` (the same function our engine calls).
- **Client sampling differs**: ours draws each round's clients from ``np_rng("sample", round)``; Flower's FedAvg
  samples node ids with Python's ``random.sample`` (seeded here with the run's seed). Same count (10 of 100), other
  clients: the final accuracies of one seed are not expected to be equal, only to agree in distribution over seeds.
  ``tests/test_flower_benchmark.py`` checks with one client per round that one round of both gives the same weights.

Timing: every run is a fresh process (ours and Flower's alternate per seed). ``wall_s`` is measured inside it from
loading the data to the evaluated final model — for Flower it includes Ray's start-up and shut-down, the actor's data
loading, message (de)serialisation; ``process_s`` adds the interpreter start and imports (``import flwr``);
``rounds_s`` is the training rounds plus the final evaluation only (ours: the engine's per-round seconds; Flower:
``FedAvg.start`` around its round loop; Flower's first round also waits for Ray and its actor to start);
``steady_s`` is the median round of rounds 2 … R − 1 (no start-up, no evaluation). The ratio reported is
ours/Flower on ``wall_s``. With ``--vectorise`` each seed runs ours looped, ours with the round's clients trained
together (``fed.batched``) and Flower, back to back, and each of our paths gets its row.

Agreement (computed, per number of rounds): with n ≥ 2 seeds, |mean_ours − mean_flwr| ≤ 2·sqrt(s_ours²/n + s_flwr²/n)
(s: sample standard deviations of the final global test accuracy over seeds; both frameworks' sampling noise is in
s). With one seed: |difference| ≤ ``--tolerance`` percentage points (default 5), a stated tolerance, not a test.

Flower is not a dependency of fed: installing ``flwr[simulation]`` into the project's venv downgrades fastapi,
protobuf, rich, starlette and uvicorn (all still within MLflow's declared ranges). Run it from a separate venv:

    python3.11 -m venv /tmp/flwr-venv
    /tmp/flwr-venv/bin/pip install torch==2.14.1 torchvision==0.29.1 "flwr[simulation]==1.42.0" tqdm
    /tmp/flwr-venv/bin/pip install --no-deps -e .
    /tmp/flwr-venv/bin/python benchmarks/flower_fedavg.py --rounds 5 10 --seeds 0 1 2

(``fed``'s import path here needs only torch, numpy, pyyaml and tqdm; the rest of its dependencies are not
installed there.) Fashion-MNIST is prepared under ``--data-root`` from the Debian package when missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # offline: no usage events
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------------------------- the cell
def protocol(
    preset: str = "fedzda", partition: str = "unimodal", overlays: tuple[str, ...] = ("config/fmnist.yaml",)
) -> tuple[dict, dict]:
    """The preset (``base`` resolved) and partition spec as ``snakemake --configfile <overlays>`` sees them."""
    from fed.config import load_yaml, merge_under, resolve_preset, with_papers

    config = load_yaml(REPO / "config.yaml")
    for path in overlays:
        config = merge_under(config, load_yaml(REPO / path))
    config = with_papers(config, REPO / "config" / "papers")
    return resolve_preset(config["presets"], preset), dict(config["partitions"][partition])


@dataclasses.dataclass
class Cell:
    """Everything a run of either framework needs, JSON-serialisable (it travels to Flower's actors)."""

    dataset: str
    data_root: str
    partition_file: str
    seed: int
    rounds: int
    cfg: dict[str, Any]  # FLConfig fields

    def config(self):
        from fed.config import FLConfig

        return FLConfig(**self.cfg)


def make_cell(
    preset: dict, dataset: str, data_root: str, partition_file: str, seed: int, rounds: int, vectorise: bool = False
) -> Cell:
    """The preset for ``rounds`` rounds on the CPU, evaluated after the last round only, no checkpoints; with
    ``vectorise`` our engine trains a round's clients together (``fed.batched``; Flower's clients are its own)."""
    from fed.config import FLConfig

    cfg = FLConfig.from_preset(preset, dataset)
    cfg = dataclasses.replace(cfg, rounds=rounds, eval_every=rounds, checkpoint_every=rounds, device="cpu")
    cfg = dataclasses.replace(cfg, vectorise=vectorise)
    return Cell(dataset, str(data_root), str(partition_file), seed, rounds, cfg.to_dict())


def write_partition(spec: dict, cfg_preset: dict, dataset: str, data_root: str, seed: int, out: Path) -> Path:
    """The partition file the ``partition`` rule writes for this preset, dataset, scheme and seed."""
    from fed.data.partition import write_partition as write

    return write(dataset, data_root, spec, cfg_preset, seed, out)


# ---------------------------------------------------------------------------------------------- ours
def run_ours(cell: Cell) -> dict[str, Any]:
    import torch

    from fed.config import MethodSpec
    from fed.runner import make_engine

    t0 = time.perf_counter()
    engine = make_engine(
        cell.config(),
        MethodSpec("fedavg", "fedavg", {}),
        cell.dataset,
        cell.data_root,
        cell.partition_file,
        cell.seed,
        threads=1,
        progress=None,
    )
    summary = engine.run()
    wall = time.perf_counter() - t0
    return {
        "framework": "batched" if cell.cfg.get("vectorise") else "ours",
        "wall_s": wall,
        "rounds_s": sum(r["seconds"] for r in summary["history"]),
        "round_s": [r["seconds"] for r in summary["history"]],  # the last one includes the final evaluation
        "global_acc": summary["last"]["global_acc"],
        "local_acc_mean": summary["last"]["local_acc_mean"],
        "threads": torch.get_num_threads(),
        "model": type(engine.model).__name__,
        "state": engine.global_state,
    }


# ---------------------------------------------------------------------------------------------- Flower
_CONTEXTS: dict[str, Any] = {}


def cell_context(cell_json: str):
    """Our data, partition, model factory and seeded streams for a cell (``fed.context.Context``), once per process
    (a Flower actor keeps it between rounds, as a Flower client keeps its loaded data)."""
    if cell_json not in _CONTEXTS:
        import torch

        from fed.context import Context
        from fed.data.datasets import load_dataset

        torch.set_num_threads(1)
        cell = Cell(**json.loads(cell_json))
        partition = json.loads(Path(cell.partition_file).read_text())
        train = load_dataset(cell.dataset, cell.data_root, "train")
        test = load_dataset(cell.dataset, cell.data_root, "test")
        _CONTEXTS[cell_json] = Context(cell.config(), train, test, partition, cell.seed, torch.device("cpu"))
    return _CONTEXTS[cell_json]


def flower_train(msg, context):
    """Flower ``ClientApp`` ``@train``: local SGD of node ``partition-id`` k on client k's data from the received
    global weights; the reply carries the weights and the aggregation weight (1: the preset's arithmetic mean)."""
    import torch.nn.functional as F
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    config = msg.content["config"]
    ctx = cell_context(str(config["cell"]))
    k, r = int(context.node_config["partition-id"]), int(config["server-round"])
    ctx.round = r  # the round's learning rate and the client's shuffling stream, as in fed.rounds.run_round
    model = ctx.model
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    x, y = ctx.client_data(k)
    stats = ctx.train(model, x, y, lambda xb, yb: F.cross_entropy(model(xb), yb), ctx.rng("shuffle", r, k))
    weight = float(len(y)) if ctx.cfg.aggregation == "weighted" else 1.0
    metrics = MetricRecord({"train_loss": stats.loss, "num-examples": len(y), "weight": weight})
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)


def client_app():
    from flwr.clientapp import ClientApp

    app = ClientApp()
    app.train()(flower_train)
    return app


def flower_strategy(cfg, num_clients: int):
    """FedAvg as Flower ships it: ``int(fraction · nodes)`` clients a round, no federated evaluation, aggregation
    weighted by the replies' ``weight`` (1 each: the preset's arithmetic mean; the sample count when weighted)."""
    from flwr.serverapp.strategy import FedAvg

    return FedAvg(
        fraction_train=cfg.fraction,
        fraction_evaluate=0.0,
        min_train_nodes=1,
        min_available_nodes=num_clients,
        weighted_by_key="weight",
    )


def server_app(cell: Cell, out: dict[str, Any]):
    """Flower ``ServerApp``: FedAvg for ``cell.rounds`` rounds from our initial weights, our evaluation of the
    final global model (``evaluate_fn``); results go to ``out`` (the app runs in this process)."""
    from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
    from flwr.serverapp import ServerApp

    from fed.evaluation import evaluate

    app = ServerApp()
    cell_json = json.dumps(dataclasses.asdict(cell), sort_keys=True)

    @app.main()
    def main(grid, context) -> None:
        random.seed(cell.seed)  # Flower's FedAvg samples nodes with Python's global `random`
        ctx = cell_context(cell_json)
        initial = ArrayRecord(ctx.global_state)

        stamps: dict[int, float] = {}

        def evaluate_fn(server_round: int, arrays) -> MetricRecord | None:
            stamps[server_round] = time.perf_counter()  # called before round 1 and after every round
            if server_round != cell.rounds:
                return None
            ctx.global_state = arrays.to_torch_state_dict()
            m = evaluate(ctx)
            out["state"] = ctx.global_state
            return MetricRecord({"global_acc": m["global_acc"], "local_acc_mean": m["local_acc_mean"]})

        t0 = time.perf_counter()
        result = flower_strategy(ctx.cfg, ctx.num_clients).start(
            grid,
            initial,
            num_rounds=cell.rounds,
            train_config=ConfigRecord({"cell": cell_json}),
            evaluate_fn=evaluate_fn,
        )
        end = time.perf_counter()
        out["rounds_s"] = end - t0
        stamps[cell.rounds] = end  # the last round's time includes the final evaluation, as ours does
        out["round_s"] = [stamps[r] - stamps[r - 1] for r in range(1, cell.rounds + 1)]
        final = result.evaluate_metrics_serverapp[cell.rounds]
        out["global_acc"], out["local_acc_mean"] = float(final["global_acc"]), float(final["local_acc_mean"])
        out["train_loss"] = {int(r): float(m["train_loss"]) for r, m in result.train_metrics_clientapp.items()}

    return app


def run_flower(cell: Cell) -> dict[str, Any]:
    import torch
    from flwr.simulation import run_simulation

    torch.set_num_threads(1)
    out: dict[str, Any] = {"framework": "flower"}
    t0 = time.perf_counter()
    run_simulation(
        server_app=server_app(cell, out),
        client_app=client_app(),
        num_supernodes=cell.cfg["num_clients"],
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 1}},
    )
    out["wall_s"] = time.perf_counter() - t0
    if "global_acc" not in out:
        raise RuntimeError("Flower's simulation ended without evaluating the final model (see its log above)")
    import flwr

    out["flwr"] = flwr.__version__
    out["threads"] = torch.get_num_threads()
    return out


# ---------------------------------------------------------------------------------------------- comparison
def agreement(ours: list[float], flwr: list[float], tolerance: float) -> dict[str, Any]:
    """Whether the final accuracies agree: |Δmean| ≤ 2·sqrt(s_o²/n + s_f²/n) over n ≥ 2 seeds, else ≤ tolerance."""
    n = min(len(ours), len(flwr))
    diff = statistics.fmean(ours) - statistics.fmean(flwr)
    if n >= 2:
        bound = 2 * math.sqrt(statistics.variance(ours) / len(ours) + statistics.variance(flwr) / len(flwr))
        rule = f"|mean diff| <= 2*sqrt(s_ours^2/n + s_flwr^2/n), n={n} seeds"
    else:
        bound, rule = tolerance, f"one seed: |diff| <= {tolerance} percentage points (stated tolerance)"
    return {"diff": diff, "bound": bound, "rule": rule, "agree": abs(diff) <= bound}


OURS = {"ours": "ours", "batched": "ours, batched"}  # our engine looped, and with a round's clients trained together


def summarise(runs: list[dict[str, Any]], tolerance: float) -> list[dict[str, Any]]:
    """One row per number of rounds and our engine's path ("ours": clients looped; "batched": ``--vectorise``)."""
    rows = []
    for rounds in sorted({r["rounds"] for r in runs}):
        by = {fw: [r for r in runs if r["rounds"] == rounds and r["framework"] == fw] for fw in (*OURS, "flower")}
        for engine in OURS:
            if not by[engine] or not by["flower"]:
                continue

            def mean(fw: str, key: str, by: dict = by) -> float:
                return statistics.fmean(r[key] for r in by[fw])

            def sd(fw: str, by: dict = by) -> float:
                return statistics.stdev(r["global_acc"] for r in by[fw]) if len(by[fw]) > 1 else math.nan

            def per_seed(a: str, b: str, by: dict = by) -> dict[int, float]:
                # the runs of a seed ran back to back: their ratio sees the same background load
                return {x["seed"]: x["wall_s"] / y["wall_s"] for x in by[a] for y in by[b] if y["seed"] == x["seed"]}

            rows.append(
                {
                    "rounds": rounds,
                    "engine": engine,
                    "seeds": sorted(r["seed"] for r in by[engine]),
                    "ours_wall_s": mean(engine, "wall_s"),
                    "flower_wall_s": mean("flower", "wall_s"),
                    "ratio_ours_over_flower": mean(engine, "wall_s") / mean("flower", "wall_s"),
                    "ratio_per_seed": per_seed(engine, "flower"),
                    "ratio_over_loop_per_seed": per_seed(engine, "ours") if by["ours"] else {},
                    "ours_rounds_s": mean(engine, "rounds_s"),
                    "flower_rounds_s": mean("flower", "rounds_s"),
                    "ratio_rounds_only": mean(engine, "rounds_s") / mean("flower", "rounds_s"),
                    "ours_steady_s": mean(engine, "steady_s"),
                    "flower_steady_s": mean("flower", "steady_s"),
                    "ratio_steady": mean(engine, "steady_s") / mean("flower", "steady_s"),
                    "ours_process_s": mean(engine, "process_s"),
                    "flower_process_s": mean("flower", "process_s"),
                    "ours_acc": mean(engine, "global_acc"),
                    "ours_acc_sd": sd(engine),
                    "flower_acc": mean("flower", "global_acc"),
                    "flower_acc_sd": sd("flower"),
                    "agreement": agreement(
                        [r["global_acc"] for r in by[engine]], [r["global_acc"] for r in by["flower"]], tolerance
                    ),
                }
            )
    return rows


def markdown(row: dict[str, Any]) -> str:
    a, per_seed = row["agreement"], list(row["ratio_per_seed"].values())
    return (
        f"| {row['rounds']} | {OURS[row.get('engine', 'ours')]} | {len(row['seeds'])} | "
        f"{row['ours_wall_s']:.1f} | {row['flower_wall_s']:.1f} | "
        f"**{row['ratio_ours_over_flower']:.2f}** ({min(per_seed):.2f}–{max(per_seed):.2f}) | "
        f"{row['ours_steady_s']:.1f} | {row['flower_steady_s']:.1f} | "
        f"{row['ours_acc']:.2f} ± {row['ours_acc_sd']:.2f} | {row['flower_acc']:.2f} ± {row['flower_acc_sd']:.2f} | "
        f"{a['diff']:+.2f} (bound {a['bound']:.2f}): {'agree' if a['agree'] else 'DISAGREE'} |"
    )


MARKDOWN_HEADER = (
    "| rounds | engine | seeds | ours s | Flower s | ours/Flower (per seed) | ours s/round | Flower s/round "
    "| ours acc % | Flower acc % | Δ acc (agreement) |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


# ---------------------------------------------------------------------------------------------- driver
def worker(framework: str, cell_path: str) -> None:
    """One timed run in this fresh process; prints one JSON line (prefixed RESULT) last."""
    cell = Cell(**json.loads(Path(cell_path).read_text()))
    if framework in OURS:
        result = run_ours(dataclasses.replace(cell, cfg=dict(cell.cfg, vectorise=framework == "batched")))
    else:
        result = run_flower(cell)
    result.pop("state", None)
    print("RESULT " + json.dumps(result | {"seed": cell.seed, "rounds": cell.rounds}), flush=True)


def prepare_data(dataset: str, root: str) -> None:
    from fed.data.datasets import cache_path, prepare

    if not cache_path(root, dataset).exists():
        prepare(dataset, root, download=False)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, nargs="+", default=[5, 10], help="numbers of rounds to compare")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--data-root", default="data")
    ap.add_argument("--dataset", default="fmnist")
    ap.add_argument("--preset", default="fedzda")
    ap.add_argument("--partition", default="unimodal", help="a partition of config/papers/fedzda.yaml")
    ap.add_argument("--overlay", nargs="*", default=["config/fmnist.yaml"], help="config overlays (repo-relative)")
    ap.add_argument(
        "--vectorise", action="store_true", help="also run ours with a round's clients trained together (fed.batched)"
    )
    ap.add_argument("--tolerance", type=float, default=5.0, help="one seed only: agreement tolerance, points")
    ap.add_argument("--out", default="benchmarks/logs/flower_fedavg.json", help="the JSON written at the end")
    ap.add_argument("--log-dir", default="benchmarks/logs/flower_fedavg", help="one text log per run")
    ap.add_argument("--summarise", metavar="JSON", help="recompute the summary of an earlier --out file, no runs")
    ap.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "CELL_JSON"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return
    if args.summarise:
        record = json.loads(Path(args.summarise).read_text())
        report(summarise(record["runs"], args.tolerance))
        return
    prepare_data(args.dataset, args.data_root)
    preset, spec = protocol(args.preset, args.partition, tuple(args.overlay))
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            part = write_partition(spec, preset, args.dataset, args.data_root, seed, Path(tmp) / f"part{seed}.json")
            for rounds in args.rounds:
                root = str(Path(args.data_root).resolve())
                cell = make_cell(preset, args.dataset, root, str(part), seed, rounds)
                cell_path = Path(tmp) / f"cell{seed}_{rounds}.json"
                cell_path.write_text(json.dumps(dataclasses.asdict(cell)))
                for framework in ("ours", "batched", "flower") if args.vectorise else ("ours", "flower"):
                    log = log_dir / f"{framework}_r{rounds}_seed{seed}.log"
                    t0 = time.perf_counter()
                    with open(log, "w") as fh:
                        proc = subprocess.run(
                            [sys.executable, __file__, "--worker", framework, str(cell_path)],
                            stdout=fh,
                            stderr=subprocess.STDOUT,
                            text=True,
                            cwd=REPO,
                        )
                    process_s = time.perf_counter() - t0
                    lines = [ln for ln in log.read_text().splitlines() if ln.startswith("RESULT ")]
                    if proc.returncode or not lines:
                        raise SystemExit(f"{framework} r={rounds} seed={seed} failed ({proc.returncode}); see {log}")
                    run = json.loads(lines[-1].removeprefix("RESULT ")) | {"process_s": process_s}
                    middle = run["round_s"][1:-1] or run["round_s"]
                    run["steady_s"] = statistics.median(middle)
                    runs.append(run)
                    print(
                        f"{framework:6s} rounds={rounds:3d} seed={seed} wall={run['wall_s']:.1f}s "
                        f"steady={run['steady_s']:.1f}s/round process={process_s:.1f}s acc={run['global_acc']:.2f}",
                        flush=True,
                    )
    rows = summarise(runs, args.tolerance)
    import torch

    record = {
        "started": started,
        "preset": args.preset,
        "overlays": args.overlay,
        "partition": args.partition,
        "vectorise": args.vectorise,
        "partition_spec": spec,
        "dataset": args.dataset,
        "cfg": make_cell(preset, args.dataset, args.data_root, "-", 0, 0).cfg,
        "torch": torch.__version__,
        "flwr": next((r["flwr"] for r in runs if "flwr" in r), None),
        "cpus": os.cpu_count(),
        "load_avg_at_end": os.getloadavg(),
        "sampling": "ours: np_rng('sample', round); Flower: random.sample seeded with the run seed (other clients)",
        "runs": runs,
        "summary": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    report(rows)


def report(rows: list[dict[str, Any]]) -> None:
    print(json.dumps(rows, indent=1))
    print(MARKDOWN_HEADER)
    for row in rows:
        print(markdown(row))


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    import flower_fedavg  # this file under its module name: Flower's Ray actors import it by that name

    flower_fedavg.main()
