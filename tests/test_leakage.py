"""The privacy ledger's leakage audit (fed.leakage) and its table columns (fed.reporting.audit)."""

import json
import math

import pytest
import torch

from fed.algorithms import build_algorithm
from fed.config import FLConfig
from fed.data.datasets import load_dataset, load_labels
from fed.data.partition import make_partition
from fed.engine import Engine
from fed.leakage import audit, closer_to_train, dcr, leakage_score
from fed.reporting.audit import audit_costs, audit_privacy

TINY = {"per_class": 2, "iterations": 3, "lr": 0.1}  # the model inversion, small
CFG = FLConfig(num_clients=4, fraction=1.0, rounds=1, local_epochs=1, batch_size=8, lr=0.05, model="cnn_mnist")


def test_dcr_and_closer_to_train_by_hand():
    a = torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 3.0]])
    train = torch.tensor([[0.0, 1.0], [4.0, 4.0]])
    hold = torch.tensor([[2.0, 0.0], [0.0, 5.0]])
    # (0,0): 1 to (0,1), 2 to (2,0); (4,0): 4 to (4,4), 2 to (2,0); (0,3): 2 to (0,1), 2 to (0,5): a tie
    assert dcr(a, train).tolist() == pytest.approx([1.0, 4.0, 2.0])
    assert dcr(a, hold).tolist() == pytest.approx([2.0, 2.0, 2.0])
    assert closer_to_train(a, train, hold).tolist() == [1.0, 0.0, 0.5]
    assert closer_to_train(a, hold, train).tolist() == [0.0, 1.0, 0.5]  # the roles are not symmetric
    assert dcr(a.view(3, 1, 2), train.view(2, 2, 1)).tolist() == pytest.approx([1.0, 4.0, 2.0])  # flattened
    # chance: 3 training records of 4 → 0.75; a rate of 0.9 is (0.9 − 0.75)/0.25 = 0.6 of the way to raw records
    assert leakage_score(0.9, 0.75) == pytest.approx(0.6)
    assert leakage_score(1.0, 0.75) == 1.0 and leakage_score(0.75, 0.75) == 0.0
    assert leakage_score(0.5, 0.75) == pytest.approx(-1.0)  # nearer held-out records than chance


def test_each_distinct_nearest_record_counts_once_by_hand():
    """Hubs: five artifacts near one held-out record are one piece of evidence, not five."""

    from fed.leakage import Shared, rates

    x = torch.tensor([[0.0, 0.0], [10.0, 0.0], [20.0, 0.0], [0.0, 10.0], [50.0, 50.0], [90.0, 90.0]])
    y = torch.zeros(6, dtype=torch.long)  # one class: the per-class null is the per-client one
    ctx = tiny_ctx(x, y, [[0, 1, 2], [4]], [[3], [5]])
    near_3 = torch.tensor([[0.0, 9.0], [0.1, 9.0], [0.0, 9.5], [0.2, 9.2], [0.0, 9.9]])  # all nearest to 3 (held out)
    a = torch.cat([near_3, torch.tensor([[10.0, 0.1], [0.0, 5.0]])])  # nearest to 1 (train); a tie of 0 and 3
    out = rates([Shared("k", 0, a)], ctx)["k"]
    assert out["closer_to_train"] == pytest.approx((1 + 0.5) / 7)  # per artifact
    assert out["distinct_nearest"] == 3  # records 3, 1 and 0 (a tie goes to the training record)
    assert out["closer_to_train_distinct"] == pytest.approx((0 + 1 + 0.5) / 3) and out["chance"] == 0.75
    assert out["leakage"] == pytest.approx((0.5 - 0.75) / 0.25)
    # the model's (owner -1): all clients' records pooled, chance 4 training of 6
    pooled = rates([Shared("m", -1, torch.tensor([[60.0, 60.0], [89.0, 89.0]]))], ctx)["m"]
    assert pooled["chance"] == pytest.approx(4 / 6) and pooled["closer_to_train_distinct"] == 0.5
    assert pooled["leakage"] == pytest.approx((0.5 - 4 / 6) / (1 - 4 / 6))


def tiny_ctx(x, y, train, held, num_classes=2):
    from types import SimpleNamespace

    return SimpleNamespace(
        train_idx=[torch.tensor(i) for i in train],
        test_idx=[torch.tensor(i) for i in held],
        samples=lambda idx: (x[idx], y[idx]),
        train_set=SimpleNamespace(y=y),
        num_classes=num_classes,
        seed_int=lambda *keys: 0,
    )


def test_the_null_is_per_class_and_a_class_held_on_one_side_is_left_out_by_hand():
    """Client 0 holds class 0 as 2 training records and 2 held out, class 1 as 4 training records only: an artifact
    of class 1 finds a training record whatever it carries. Per client that is a hit at chance 6/8; per class it is
    no evidence (left out), and the class-0 artifacts are tested at chance 2/4."""
    from fed.leakage import Shared, rates

    x = torch.tensor([[0.0, 0], [0, 10], [1, 0], [1, 10], [50, 0], [50, 10], [60, 0], [60, 10]])
    y = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    ctx = tiny_ctx(x, y, [[0, 1, 4, 5, 6, 7]], [[2, 3]])
    a = torch.tensor([[0.1, 0], [0.9, 10], [50, 0.1], [60, 9.9]])  # nearest: 0 (train), 3 (held), 4, 7 (train)
    out = rates([Shared("k", 0, a)], ctx)["k"]
    assert out["distinct_nearest"] == 2 and out["records_left_out"] == 2
    assert out["closer_to_train_distinct"] == 0.5 and out["chance"] == 0.5 and out["leakage"] == 0.0
    assert out["chance_client"] == 0.75 and out["leakage_client"] == pytest.approx((3 / 4 - 3 / 4) / (1 / 4))
    lo, hi = out["leakage_ci"]
    assert lo <= out["leakage"] <= hi and lo >= -1 and hi <= 1
    assert out["attack_strata_left_out"] == 1  # the attack's (client 0, class 1) has no held-out record either


def test_the_attack_scores_records_by_their_distance_to_the_closest_artifact_by_hand():
    """Members at 0.25 and 0.75 from the closest artifact, held-out records at 0.5 and 1: sorted, m n m n, the best
    threshold passes one member and no held-out record: advantage .5 (the same after calibration, one class)."""
    from fed.leakage import Shared, rates

    x = torch.tensor([[0.0, 0], [0, 10], [0, 20], [0, 30], [9, 9]])
    y = torch.zeros(5, dtype=torch.long)
    ctx = tiny_ctx(x, y, [[0, 1]], [[2, 3]], num_classes=1)
    a = torch.tensor([[0.25, 0], [0.75, 10], [0.5, 20], [1, 30]])
    out = rates([Shared("k", 0, a)], ctx)["k"]
    assert out["attack_records"] == 4 and out["attack_strata_left_out"] == 0
    assert out["advantage"] == 0.5
    # made from record 0 only (Shared.members): 0 against 2, 3 separates; record 1 is not a record of the test
    only = rates([Shared("k", 0, a, members=torch.tensor([0]))], ctx)["k"]
    assert only["attack_records"] == 3 and only["advantage"] == 1.0


def engine(root, method, cfg=CFG, **params):
    labels = load_labels("synthetic", root)
    part = make_partition(labels, "label_quantity", 4, seed=0, k=2)
    return Engine(
        cfg,
        build_algorithm(method, **params),
        load_dataset("synthetic", root, "train"),
        load_dataset("synthetic", root, "test"),
        part,
        0,
        progress=None,
    )


def test_raw_samples_sit_on_their_owner_s_training_records(synthetic_root):
    eng = engine(synthetic_root, "feddata", share_fraction=0.3)
    out = audit(eng, eng.ctx.global_state, TINY)
    raw = out["artifacts"]["raw_samples"]
    sizes = [len(i) for i in eng.ctx.train_idx]
    assert raw["n"] == raw["audited"] == sum(math.ceil(0.3 * n) for n in sizes)
    assert raw["distinct_nearest"] + raw["records_left_out"] == raw["n"]
    assert (
        raw["closer_to_train"] == raw["leakage"] == 1.0 and raw["dcr_train_median"] < 1e-5 < raw["dcr_holdout_median"]
    )
    held = [len(i) for i in eng.ctx.test_idx]  # the old null: the owner's training records' share of its records
    shares = [math.ceil(0.3 * n) for n in sizes]
    chance = sum(s * n / (n + h) for s, n, h in zip(shares, sizes, held)) / sum(shares)
    assert raw["chance_client"] == pytest.approx(chance) and raw["leakage_client"] == 1.0
    y = eng.ctx.train_set.y  # per class: the share of the owner's records of the record's class, where both sides
    per_class = []
    for k, idx in enumerate(eng.algorithm.pool):
        for c in y[idx].tolist():
            t, h = (int((y[i] == c).sum()) for i in (eng.ctx.train_idx[k], eng.ctx.test_idx[k]))
            per_class += [t / (t + h)] if h else []
    assert raw["distinct_nearest"] == len(per_class) and raw["chance"] == pytest.approx(sum(per_class) / len(per_class))
    assert raw["advantage"] == 1.0  # the shared records themselves: at distance 0, every held-out record farther
    assert raw["bytes"] == raw["n"] * eng.ctx.train_set.x[0].numel() * 4


def test_mean_batches_are_tested_against_their_own_client(synthetic_root):
    # a mean of one sample is the sample: every one closer to its owner's training records (a wrong owner: < 1)
    eng = engine(synthetic_root, "fedmix", mean_batch=1, lam=0.1)
    ones = audit(eng, eng.ctx.global_state, TINY)["artifacts"]["mean_batches"]
    assert ones["leakage"] == 1.0 and ones["dcr_train_median"] < 1e-5
    eng = engine(synthetic_root, "fedmix", mean_batch=10, lam=0.1)
    tens = audit(eng, eng.ctx.global_state, TINY)["artifacts"]["mean_batches"]
    assert tens["n"] == sum(math.ceil(len(i) / 10) for i in eng.ctx.train_idx)
    assert tens["dcr_train_median"] > 0  # a mean of ten is no record, though it may sit nearest its members


def test_non_finite_artifacts_are_counted_not_tested(synthetic_root):
    from fed.leakage import Shared, rates

    ctx = engine(synthetic_root, "fedavg").ctx
    x = ctx.train_set.x[ctx.train_idx[0][:3]].clone()
    x[1] = float("nan")  # a diverged model's output
    out = rates([Shared("raw_samples", 0, x)], ctx)["raw_samples"]
    assert out["n"] == 3 and out["non_finite"] == 1 and out["audited"] == 2 and out["leakage"] == 1.0
    nan = rates([Shared("raw_samples", 0, x[1:2])], ctx)["raw_samples"]
    assert nan["audited"] == 0 and "leakage" not in nan  # nothing to test: no score, not a score of chance


def test_a_method_that_shares_only_its_model_is_audited_by_inverting_it(synthetic_root):
    eng = engine(synthetic_root, "fedavg")
    out = audit(eng, eng.global_state, TINY)
    assert set(out["artifacts"]) == {"model_inversion", "client_updates"}
    updates = out["artifacts"]["client_updates"]  # round R + 1's clients (all 4 here), each its own records
    records = sum(map(len, eng.ctx.train_idx)) + sum(map(len, eng.ctx.test_idx))
    assert updates["n"] == 4 and updates["attack_records"] <= records
    assert -1 <= updates["advantage_ci"][0] <= updates["advantage"] <= updates["advantage_ci"][1] <= 1
    inv = out["artifacts"]["model_inversion"]
    assert inv["n"] == inv["audited"] == TINY["per_class"] * eng.ctx.num_classes
    assert inv["leakage"] < 1 and inv["dcr_train_median"] > 0
    train, held = (sum(map(len, idx)) for idx in (eng.ctx.train_idx, eng.ctx.test_idx))
    assert inv["chance"] == pytest.approx(train / (train + held))  # every client's records pooled
    assert out["inversion"] == TINY
    assert out["model_bytes"] == sum(v.numel() * v.element_size() for v in eng.global_state.values())
    assert out["item_bytes"]["raw_samples"] == eng.ctx.train_set.x[0].numel() * 4


def test_a_client_update_that_memorises_its_records_gives_them_away(synthetic_root):
    """Random labels, 30 local epochs: each client's model after its update fits its own records' labels and not its
    held-out ones', so their losses separate members from held-out records (advantage 1); an update that changes
    nothing (lr 0) carries no such signal."""
    import dataclasses

    from fed.leakage import update_attack

    eng = engine(synthetic_root, "fedavg")
    eng.ctx.cfg = dataclasses.replace(CFG, local_epochs=30, lr=0.1)
    y = eng.ctx.train_set.y
    y[:] = torch.randint(eng.ctx.num_classes, y.shape, generator=torch.Generator().manual_seed(0))
    eng.algorithm.setup(eng.ctx)
    memorised = update_attack(eng.algorithm, eng.ctx, eng.ctx.global_state)
    assert memorised["advantage"] == 1.0 and memorised["n"] == 4
    eng.ctx.cfg = dataclasses.replace(CFG, lr=0.0)  # an update that changes nothing
    untrained = update_attack(eng.algorithm, eng.ctx, eng.ctx.global_state)
    assert untrained["advantage_ci"][0] < 0 < untrained["advantage_ci"][1]  # no signal: 0 inside its interval


def test_the_inversion_s_held_out_records_are_the_clients_held_out_splits(synthetic_root):
    # records of the training file never trained on (not the test file): a copy of each is its own closest
    # held-out record, never nearer a training record
    from fed.leakage import Shared, rates

    ctx = engine(synthetic_root, "fedavg").ctx
    held, _ = ctx.samples(torch.cat(ctx.test_idx))
    out = rates([Shared("model_inversion", -1, held)], ctx)["model_inversion"]
    assert out["audited"] == out["distinct_nearest"] == len(held)
    assert out["closer_to_train"] == out["closer_to_train_distinct"] == 0.0 and out["dcr_holdout_median"] < 1e-5


def test_flea_s_features_are_decoded_by_its_attacker_and_tested_against_their_own_client(synthetic_root, monkeypatch):
    # a perfect attacker (the record whose features match) makes every shared feature its owner's training record:
    # leakage 1 only when each client's reconstructions are tested against that client's records
    import fed.attacks
    from fed.leakage import RECONSTRUCTION

    eng = engine(synthetic_root, "flea", share_fraction=0.3)
    x = eng.ctx.train_set.x
    seen = {}

    def oracle(extract, public, epochs, generator, **settings):
        seen.update(settings, epochs=epochs, public=len(public))
        feats = extract(x).flatten(1)
        return (lambda f: x[torch.cdist(f.flatten(1), feats).argmin(1)]), []

    monkeypatch.setattr(fed.attacks, "fit_decoder", oracle)
    out = audit(eng, eng.global_state, TINY)
    rec = out["artifacts"]["reconstructed_features"]
    assert rec["n"] == rec["audited"] == sum(math.floor(0.3 * len(i)) for i in eng.ctx.train_idx)
    assert rec["leakage"] == 1.0 and rec["dcr_train_median"] < 1e-5
    assert seen == {"lr": 1e-3, "optimizer": "adam", "kind": "code", "epochs": 10, "public": len(eng.ctx.test_set.x)}
    assert out["reconstruction"] == RECONSTRUCTION
    monkeypatch.undo()  # the real attacker, briefly: a decoder's images, one per shared feature
    real = audit(eng, eng.global_state, TINY, reconstruction={**RECONSTRUCTION, "epochs": 1, "samples": 64})
    assert real["artifacts"]["reconstructed_features"]["n"] == rec["n"] and real["reconstruction"]["epochs"] == 1


def write(tmp_path, name, audit_record, metrics):
    a, m = tmp_path / f"{name}.audit.json", tmp_path / f"{name}.metrics.json"
    a.write_text(json.dumps(audit_record))
    m.write_text(json.dumps(metrics))
    return {"dataset": "d", "partition": "p", "method": name, "seed": 0, "path": str(a), "metrics": str(m)}


def test_audited_columns_by_hand(tmp_path):
    jobs = {"train": {"seconds": 9.0, "max_rss_mb": 700.0, "cpu_seconds": 8.0}}
    inversion = {"model_inversion": {"leakage": 0.0}}
    cells = [
        write(
            tmp_path,
            "scaffold",
            {"model_bytes": 1_000_000, "item_bytes": {"raw_samples": 3136}, "artifacts": inversion, "jobs": jobs},
            {"method": {"algorithm": "scaffold"}, "config": {"num_clients": 4}, "shared": {}},
        ),
        write(
            tmp_path,
            "dafl",
            {
                "model_bytes": 1_000_000,
                "item_bytes": {"synthetic_samples": 3136},
                "artifacts": {
                    "synthetic_samples": {
                        "leakage": 0.2,
                        "closer_to_train": 0.9,
                        "closer_to_train_distinct": 0.8,
                        "distinct_nearest": 17,
                        "chance": 0.75,
                        "dcr_train_median": 2.0,
                        "dcr_holdout_median": 4.0,
                        "leakage_ci": [0.1, 0.3],
                        "leakage_client": 0.25,
                        "advantage": 0.05,
                        "advantage_ci": [-0.02, 0.12],
                    },
                    "client_updates": {"advantage": 0.4, "advantage_ci": [0.3, 0.5]},
                    **inversion,
                },
                "jobs": {**jobs, "stage gans: dp_cgan": {"seconds": 60.0, "max_rss_mb": 900.0, "cpu_seconds": 1.0}},
            },
            {
                "method": {"algorithm": "dafl"},
                "config": {"num_clients": 4},
                "shared": {"synthetic_samples": 1000, "epsilon_total": 51.0},
            },
        ),
    ]
    costs = audit_costs(cells).set_index("method")
    assert costs.loc["scaffold", "mb_per_client_round"] == 4.0  # model and control variate, down and up
    assert costs.loc["dafl", "mb_per_client_round"] == 2.0
    assert costs.loc["dafl", "mb_shared_per_client"] == pytest.approx(1000 * 3136 / 4 / 1e6, abs=1e-3)
    assert costs.loc["dafl", "stage_seconds"] == 60.0 and costs.loc["scaffold", "stage_seconds"] == 0.0
    assert costs.loc["dafl", "stage_peak_rss_mb"] == 900.0 and costs.loc["dafl", "peak_rss_mb"] == 700.0
    raw = audit_costs(cells, decimals=None).set_index("method")
    assert raw.loc["dafl", "mb_shared_per_client"] == 1000 * 3136 / 4 / 1e6  # 0.784: 3 decimals hide nothing here
    assert audit_costs(cells, decimals=1).set_index("method").loc["dafl", "mb_shared_per_client"] == 0.8
    privacy = audit_privacy(cells).set_index("method")
    assert privacy.loc["dafl", "records"] == "synthetic_samples" and privacy.loc["scaffold", "records"] == ""
    assert privacy.loc["dafl", "leakage"] == 0.2 and math.isnan(privacy.loc["scaffold", "leakage"])
    assert privacy.loc["dafl", "dcr_holdout"] == 4.0 and privacy.loc["dafl", "chance"] == 0.75
    assert privacy.loc["dafl", "closer_to_train"] == 0.8 and privacy.loc["dafl", "nearest_records"] == 17
    assert privacy.loc["dafl", "mb_shared"] == pytest.approx(3.136)  # the ε in the ledger is not an item
    assert privacy.loc["scaffold", "inversion_leakage"] == 0.0
    assert privacy.loc["dafl", "leakage_lo"] == 0.1 and privacy.loc["dafl", "leakage_hi"] == 0.3
    assert privacy.loc["dafl", "leakage_client"] == 0.25 and privacy.loc["dafl", "advantage_hi"] == 0.12
    assert privacy.loc["dafl", "update_advantage"] == 0.4 and privacy.loc["dafl", "update_advantage_lo"] == 0.3
    assert math.isnan(privacy.loc["scaffold", "leakage_lo"])  # an audit from before the intervals
    assert "leakage_lo" not in audit_privacy(cells[:1]).columns  # no audit of the table has intervals: no column
    # the table's rounding is the caller's: a display that rounds again reads the unrounded means
    assert audit_privacy(cells, decimals=1).set_index("method").loc["dafl", "mb_shared"] == 3.1
    assert audit_privacy(cells, decimals=None).set_index("method").loc["dafl", "mb_shared"] == 1000 * 3136 / 1e6


def test_feddpms_without_a_shared_stage_i_is_audited_after_its_own(synthetic_root):
    """warm_start: false (the head-to-head protocol's boards): no Stage I file; the audit reruns the cell's P rounds
    with its seeds, then shares, decodes and attacks."""
    import dataclasses

    cfg = dataclasses.replace(CFG, model="cnn_dpms_fmnist", rounds=3)
    eng = engine(synthetic_root, "feddpms", cfg, preliminary_rounds=1, quota=20, noise_multiplier=1.0)
    assert "warm" not in eng.ctx.stages
    out = audit(eng, eng.ctx.global_state, TINY)
    assert out["artifacts"]["decoded_latent_means"]["n"] > 0 and out["artifacts"]["client_updates"]["n"] == 4


def test_the_leakage_glance_prints_each_attack_with_its_interval_by_hand():
    """A regime's rows: each score with its interval (the privacy table's mean over seeds of each cell's interval),
    — where the method shares no artifact or trained no round, and other regimes left out."""
    import pandas as pd

    from fed.reporting.audit import leakage_glance

    privacy = pd.DataFrame(
        [
            {"partition": "r", "method": "flea", "records": "reconstructed_features", "leakage": 0.594,
             "leakage_lo": 0.511, "leakage_hi": 0.667, "advantage": 0.61, "advantage_lo": 0.57, "advantage_hi": 0.65,
             "update_advantage": 0.05, "update_advantage_lo": -0.04, "update_advantage_hi": 0.13,
             "inversion_leakage": 0.04},
            {"partition": "r", "method": "fedavg", "records": math.nan, "leakage": math.nan, "update_advantage": 0.1,
             "update_advantage_lo": 0.01, "update_advantage_hi": 0.18, "inversion_leakage": 0.16},
            {"partition": "other", "method": "flea", "records": "reconstructed_features", "leakage": 0.99},
        ]
    )  # fmt: skip
    g = leakage_glance(privacy, "r", ["fedavg", "flea", "dpms"]).set_index("method")
    assert g.loc["flea", "artifact attacked"] == "reconstructed_features"
    assert g.loc["flea", "leakage [95 % CI]"] == "0.59 [0.51, 0.67]"
    assert g.loc["flea", "membership advantage [95 % CI]"] == "0.61 [0.57, 0.65]"
    assert g.loc["flea", "update advantage [95 % CI]"] == "0.05 [-0.04, 0.13]"
    assert g.loc["fedavg", "artifact attacked"] == "model updates only" and g.loc["fedavg", "leakage [95 % CI]"] == "—"
    assert g.loc["fedavg", "inversion leakage"] == "0.16"
    assert (g.loc["dpms"].drop("artifact attacked") == "—").all()  # no row: trained no round, nothing audited
    assert g.loc["dpms", "artifact attacked"] == "nothing audited"
