"""Preparatory stages run on their own and hand their file to the runs that declare them."""

import json

import numpy as np
import pytest
import torch

from fed.algorithms import build_algorithm
from fed.config import FLConfig, MethodSpec
from fed.data.datasets import load_labels
from fed.data.partition import make_partition, validation_split
from fed.runner import run_cell, run_stage
from fed.stages import Stage

CFG = FLConfig(num_clients=10, fraction=0.3, rounds=3, local_epochs=1, batch_size=20, eval_every=1, checkpoint_every=1)


def test_prefix_chain_and_oracle_stage(synthetic_root, tmp_path):
    part = tmp_path / "part.json"
    part.write_text(json.dumps(make_partition(load_labels("synthetic", synthetic_root), "iid", 10, seed=0)))
    args = (CFG, "synthetic", synthetic_root, part, 0)
    r1, r2 = Stage.of("fedavg_prefix", rounds=1), Stage.of("fedavg_prefix", rounds=2)
    assert r2.key == "fedavg_prefix-rounds2" and r2.spec.optional and r2.spec.continues_from == "rounds"
    run_stage(r1, *args, tmp_path / "r1.pt", tmp_path / "w1")
    run_stage(r2, *args, tmp_path / "r2.pt", tmp_path / "w2", lower=str(tmp_path / "r1.pt"))  # continues from r1
    assert torch.load(tmp_path / "r2.pt", weights_only=True)["round"] == 2
    oracle = Stage.of("centralized_model")
    run_stage(oracle, *args, tmp_path / "oracle.pt", tmp_path / "w3")
    record = torch.load(tmp_path / "oracle.pt", weights_only=True)
    assert record["dataset"] == "synthetic" and record["model"] == "cnn_mnist" and not record["diverged"]
    assert 0 <= record["last"]["global_acc"] <= 100
    # a Fed-ZDA start-round variant declares the prefix it continues from
    assert build_algorithm("fedzdac", start_round=3).stages() == {"warm": r2}


def test_validation_split_holds_out_training_data_only():
    labels = np.repeat(np.arange(4), 50)
    part = make_partition(labels, "iid", 4, seed=0, local_test_fraction=0.2)
    val = validation_split(part, labels, 0.25, seed=0)
    for before, after in zip(part["clients"], val["clients"]):
        train, held = set(after["train"]), set(after["test"])
        assert not train & held and train | held == set(before["train"])  # carved from the training split
        assert not held & set(before["test"])  # the local test split is never a validation sample
        assert len(held) == pytest.approx(0.25 * len(before["train"]), abs=4)  # stratified, per class rounding
    assert val == validation_split(part, labels, 0.25, seed=0)


def test_tuning_stage_chooses_the_best_validation_point_and_the_cell_runs_with_it(synthetic_root, tmp_path):
    part = tmp_path / "part.json"
    part.write_text(json.dumps(make_partition(load_labels("synthetic", synthetic_root), "unimodal", 10, seed=0)))
    spec = MethodSpec.from_config("qffl", {"algorithm": "qffl", "tune": {"grid": {"q": [0.001, 5.0]}, "rounds": 2}})
    stage = Stage.of("tuning", method="qffl")
    run_stage(stage, CFG, "synthetic", synthetic_root, part, 0, tmp_path / "t.pt", tmp_path / "w", method=spec)
    record = torch.load(tmp_path / "t.pt", weights_only=False)
    scores = {s["q"]: s["validation_local_acc_mean"] for s in record["scores"]}
    assert set(scores) == {0.001, 5.0} and record["chosen"] == {"q": max(scores, key=scores.get)}
    assert (tmp_path / "w/q0.001/checkpoint.pt").exists()  # each grid point its own resumable run
    out = run_cell(
        CFG, spec, "synthetic", synthetic_root, part, 0, tmp_path / "cell", stages={"tuning": tmp_path / "t.pt"}
    )
    assert out["method"]["params"] == {"q": record["chosen"]["q"]} and out["tuning"]["scores"] == record["scores"]


def test_a_tuning_after_another_runs_at_its_lr_and_scales_its_start_round(synthetic_root, tmp_path, monkeypatch):
    """The head-to-head protocol's chain through the real stage runner: FedAvg's lr tuning, then Fed-ZDAS' start
    round at that lr, each point's start round scaled to the 2-round tuning runs, and the cell at both."""
    part = tmp_path / "part.json"
    part.write_text(json.dumps(make_partition(load_labels("synthetic", synthetic_root), "unimodal", 10, seed=0)))
    tune = {"rounds": 2, "select_by": "pooled_acc", "per_seed": True}
    lr = MethodSpec.from_config("lr", {"algorithm": "fedavg", "tune": tune | {"grid": {"protocol.lr": [0.01, 0.1]}}})
    start = {"grid": {"start_round": [2, 3]}, "round_params": ["start_round"], "after": "lr"}
    zdas = MethodSpec.from_config("zdas", {"algorithm": "fedzdas", "zsdg": {"per_class": 2, "iterations": 2},
                                           "tune": tune | start})  # fmt: skip
    common = (CFG, "synthetic", synthetic_root, part, 0)
    run_stage(Stage.of("tuning", method="lr", per_seed=True), *common, tmp_path / "lr.pt", tmp_path / "w1", method=lr)
    first = torch.load(tmp_path / "lr.pt", weights_only=False)["chosen"]
    import fed.runner

    runs, make = [], fed.runner.make_engine

    def spy(cfg, spec, *args, **kwargs):  # what each tuning run trains with
        runs.append((spec.params["start_round"], cfg.lr, cfg.rounds))
        return make(cfg, spec, *args, **kwargs)

    monkeypatch.setattr(fed.runner, "make_engine", spy)
    stage = Stage.of("tuning", method="zdas", per_seed=True)
    run_stage(stage, *common, tmp_path / "z.pt", tmp_path / "w2", method=zdas, after=str(tmp_path / "lr.pt"))
    monkeypatch.undo()
    # the preset's 3 rounds → the tuning's 2: start round 2 → 1.33 → 1, 3 → 2; each at FedAvg's lr
    assert runs == [(1, first["protocol.lr"], 2), (2, first["protocol.lr"], 2)]
    record = torch.load(tmp_path / "z.pt", weights_only=False)
    assert record["after"] == first and record["chosen"]["protocol.lr"] == first["protocol.lr"]
    assert [s["start_round"] for s in record["scores"]] == [2, 3]  # the grid's values, as the cell runs them
    out = run_cell(*common[:1], zdas, *common[1:], tmp_path / "cell", stages={"tuning": tmp_path / "z.pt"})
    assert out["config"]["lr"] == first["protocol.lr"] and out["method"]["params"]["start_round"] in (2, 3)
    assert out["tuning"]["after"] == first  # what a committed copy is checked against (fed.reference)


def test_a_model_at_stage_holds_the_cell_s_global_model_at_that_round(synthetic_root, tmp_path):
    """FLea Fig. 9 attacks early rounds' models: the stage runs the cell's config and stops after round r, so it holds
    exactly the cell's model at round r — also for a method that plans by the rounds to come (CCVR calibrates its
    classifier at the last round: a run cut to r rounds would calibrate at round 2 and differ)."""
    from fed.runner import make_engine

    part = tmp_path / "part.json"
    part.write_text(json.dumps(make_partition(load_labels("synthetic", synthetic_root), "unimodal", 10, seed=0)))
    spec = MethodSpec.from_config("ccvr", {"algorithm": "ccvr", "virtual_per_class": 20, "epochs": 2})
    cell = make_engine(CFG, spec, "synthetic", synthetic_root, part, 0, work_dir=tmp_path / "cell", progress=None)
    states = {}
    cell.on_round = lambda row: states.setdefault(cell.round, {k: v.clone() for k, v in cell.global_state.items()})
    cell.run()
    stage = Stage.of("model_at", method="ccvr", rounds=2)
    run_stage(stage, CFG, "synthetic", synthetic_root, part, 0, tmp_path / "m.pt", tmp_path / "w", method=spec)
    record = torch.load(tmp_path / "m.pt", weights_only=True)
    assert record["round"] == 2 and record["model"] == CFG.model and not record["diverged"]
    assert all(torch.equal(record["state"][k], v) for k, v in states[2].items())
    assert not all(torch.equal(record["state"][k], v) for k, v in states[3].items())  # not its final model
    assert 0 <= record["last"]["global_acc"] <= 100


class RecordingRun:
    """An engine that records the work dir and rounds it was made with, checkpoints and reports a fixed round."""

    def __init__(self, made, preset_rounds, spec, rounds=None, work_dir=None, until=None, **kwargs):
        made.append((work_dir, until or rounds or preset_rounds))
        self.checkpoint_path = work_dir / "checkpoint.pt"
        self.global_state, self.cfg, self.round = {}, CFG, until

    def run(self):
        self.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"round": 1}, self.checkpoint_path)
        return {"diverged": False, "last": {"local_acc_mean": 50.0, "client_acc_variance": 1.0, "pooled_acc": 60.0}}


def test_every_stage_kind_s_runs_are_the_ones_fed_campaign_reads(tmp_path):
    """``stage_runs`` lists the FL runs (work dir, rounds) each kind's function makes, so ``fed campaign --status``
    reads a stopped stage's checkpoints where they are: each kind run with a recording engine makes exactly those."""
    from functools import partial

    from fed.runner import STAGE_RUNNERS, StageJob, stage_runner, stage_runs

    preset_rounds = 7
    expected = {  # the stage's params, and the rounds of its (first) run
        "fedavg_prefix": ({"rounds": 3}, 3),
        "vae_prelim": ({"rounds": 2, "vae_weight": 0.05}, 2),
        "model_at": ({"rounds": 4}, 4),
        "centralized_model": ({}, preset_rounds),
        "tuning": ({"method": "fedprox_t"}, 5),
    }
    tune = {"grid": {"mu": [0.01, 0.1]}, "rounds": 5}
    method = MethodSpec.from_config("fedprox_t", {"algorithm": "fedprox", "mu": 0.01, "tune": tune})
    assert set(expected) == set(STAGE_RUNNERS)
    for kind, (params, rounds) in expected.items():
        work, made = tmp_path / kind, []
        engine = partial(RecordingRun, made, preset_rounds, work_dir=work)
        stage = Stage.of(kind, **params)
        job = StageJob(stage, "fmnist", tmp_path / f"{kind}.pt", None, engine, method, work, rounds=preset_rounds)
        stage_runner(kind)(job)
        runs = stage_runs(kind, dict(stage.params), preset_rounds, method, work)
        assert made == runs and runs[0][1] == rounds, kind
    assert len(made) == 2  # the tuning's two grid points
    assert stage_runs("dp_cgan", {}, preset_rounds, None, tmp_path) is None  # a method's stage: its own progress
