"""Preparatory stages run on their own and hand their file to the runs that declare them."""

import json

import torch

from fed.algorithms import build_algorithm
from fed.config import FLConfig
from fed.data.datasets import load_labels
from fed.data.partition import make_partition
from fed.runner import run_stage
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
