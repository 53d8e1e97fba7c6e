"""benchmarks/flower_fedavg.py compares like with like: its Flower path trains the same model class on the same client
data from the same weights with the same seeded batches as our engine, so with one client per round one round of
each gives the same weights — bit for bit: Flower's FedAvg multiplies the one reply by the weight factor 1.0 (exact),
and both sides run the same float32 operations in the same order on one thread.

Flower (``flwr``) is not a dependency of fed (benchmarks/flower_fedavg.py: it runs from a venv of its own), so those
tests are skipped without it; the one that starts Ray is ``slow``."""

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import flower_fedavg as fb  # noqa: E402  (under this name: Flower's Ray actors import it so)

needs_flwr = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None,
    reason="Flower (flwr) is not installed; the benchmark runs from its own venv (see benchmarks/flower_fedavg.py)",
)


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()  # both paths set one torch thread, as the benchmark does
    yield
    torch.set_num_threads(threads)


def cell(root: Path, tmp_path: Path, num_clients: int, fraction: float, partition: str = "unimodal"):
    """The benchmark's cell (Fed-ZDA preset as config/fmnist.yaml resolves it), shrunk to the synthetic set and
    one local epoch: one round, one client per round."""
    preset, spec = fb.protocol(partition="unimodal")
    spec = spec if partition == "unimodal" else {"scheme": partition}
    preset = dict(preset, num_clients=num_clients, fraction=fraction, local_epochs=1)
    part = fb.write_partition(spec, preset, "synthetic", str(root), 0, tmp_path / "partition.json")
    return fb.make_cell(preset, "synthetic", str(root), str(part), seed=0, rounds=1)


def test_the_cell_is_the_fedzda_fmnist_protocol():
    preset, spec = fb.protocol()
    c = fb.make_cell(preset, "fmnist", "data", "partition.json", seed=1, rounds=5)
    assert spec == {"scheme": "unimodal", "shards_per_client": 2}
    assert {k: c.cfg[k] for k in ("num_clients", "fraction", "local_epochs", "batch_size", "lr", "momentum")} == {
        "num_clients": 100,
        "fraction": 0.1,
        "local_epochs": 5,
        "batch_size": 10,
        "lr": 0.02,
        "momentum": 0.0,
    }
    assert (c.cfg["model"], c.cfg["aggregation"], c.cfg["rounds"], c.cfg["eval_every"]) == ("cnn_mnist", "mean", 5, 5)


def test_agreement_rule():
    assert fb.agreement([80.0, 82.0, 84.0], [81.0, 83.0, 85.0], 5.0)["agree"]  # Δ = 1, bound 2·sqrt(4/3+4/3) ≈ 3.3
    far = fb.agreement([80.0, 80.5, 81.0], [90.0, 90.5, 91.0], 5.0)
    assert not far["agree"] and far["diff"] == pytest.approx(-10.0)
    one = fb.agreement([80.0], [84.0], 5.0)
    assert one["agree"] and one["bound"] == 5.0 and "one seed" in one["rule"]


@needs_flwr
def test_one_round_of_flower_equals_ours_with_one_client(synthetic_root, tmp_path, monkeypatch):
    """Flower's own FedAvg (node sampling, message, aggregation) around the benchmark's ClientApp, in process."""
    from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from fed.models import MODELS

    for attr in ("_run_id", "_node_id", "_task_id"):  # what a SuperLink sets for the process running a ServerApp
        monkeypatch.setattr(TaskIdentity, attr, 1)
    c = cell(synthetic_root, tmp_path, num_clients=5, fraction=0.2)
    ours = fb.run_ours(c)
    cell_json = json.dumps(dataclasses.asdict(c), sort_keys=True)
    ctx = fb.cell_context(cell_json)
    ctx.round = 1
    (k,) = ctx.sample_clients()  # the client our engine trained in round 1
    ctx.round = 0

    class Grid:  # the only Grid method FedAvg's sampling calls
        def get_node_ids(self):
            return [101]

    strategy = fb.flower_strategy(ctx.cfg, num_clients=1)
    (msg,) = strategy.configure_train(1, ArrayRecord(ctx.global_state), ConfigRecord({"cell": cell_json}), Grid())
    node = Context(run_id=1, node_id=101, node_config={"partition-id": k}, state=RecordDict(), run_config={})
    reply = fb.client_app()(msg, node)
    arrays, metrics = strategy.aggregate_train(1, [reply])

    partition = json.loads(Path(c.partition_file).read_text())
    assert type(ctx.model) is MODELS[c.cfg["model"]] and ours["model"] == type(ctx.model).__name__
    assert metrics["num-examples"] == len(partition["clients"][k]["train"]) == len(ctx.client_data(k)[1])
    flower = arrays.to_torch_state_dict()
    assert flower.keys() == ours["state"].keys()
    assert not torch.equal(flower["classifier.weight"], ctx.global_state["classifier.weight"])  # it trained
    for name, value in ours["state"].items():
        assert torch.equal(flower[name].to(value.dtype), value), name


@needs_flwr
@pytest.mark.slow
def test_flower_simulation_equals_ours_with_one_client(synthetic_root, tmp_path):
    """The benchmark's two runs as they are timed: Flower's run_simulation (Ray, one actor) against our engine."""
    c = cell(synthetic_root, tmp_path, num_clients=1, fraction=1.0, partition="iid")
    ours, flower = fb.run_ours(c), fb.run_flower(c)
    for name, value in ours["state"].items():
        assert torch.equal(flower["state"][name].to(value.dtype), value), name
    assert flower["global_acc"] == ours["global_acc"]
    assert len(flower["round_s"]) == len(ours["round_s"]) == 1


def test_the_summary_has_a_row_per_engine_with_per_seed_ratios_to_flower_and_to_the_loop():
    def run(framework, seed, wall):
        return {"framework": framework, "seed": seed, "rounds": 5, "wall_s": wall, "rounds_s": wall, "steady_s": 1.0,
                "process_s": wall, "global_acc": 50.0 + seed}  # fmt: skip

    runs = [run("ours", 0, 80), run("batched", 0, 100), run("flower", 0, 90)]
    runs += [run("ours", 1, 90), run("batched", 1, 110), run("flower", 1, 100)]
    rows = {r["engine"]: r for r in fb.summarise(runs, 5.0)}
    assert set(rows) == {"ours", "batched"}
    assert rows["ours"]["ratio_per_seed"] == {0: 80 / 90, 1: 0.9} and rows["ours"]["ratio_over_loop_per_seed"] == {
        0: 1.0,
        1: 1.0,
    }
    assert rows["batched"]["ratio_per_seed"] == {0: 100 / 90, 1: 1.1}
    assert rows["batched"]["ratio_over_loop_per_seed"] == {0: 1.25, 1: 110 / 90}
    assert rows["batched"]["ratio_ours_over_flower"] == pytest.approx(105 / 95)
    assert "| 5 | ours, batched | 2 |" in fb.markdown(rows["batched"])
    only_loop = fb.summarise([r for r in runs if r["framework"] != "batched"], 5.0)  # an older run's record
    assert [r["engine"] for r in only_loop] == ["ours"]
