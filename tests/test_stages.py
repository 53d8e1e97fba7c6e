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
