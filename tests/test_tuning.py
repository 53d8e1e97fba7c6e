"""The tuning stage's choice of a grid point (fed.runner.select_point), checked on hand-computed scores: the default
(best mean validation accuracy), the lowest validation variance, and the same within a tolerance of a reference point
(fairness at a bounded accuracy cost: the lowest variance whose mean accuracy is within 1 pp of q = 0)."""

import copy
import json

import pytest
import torch
import yaml
from conftest import REPO
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from fed.config import TUNE_DEFAULTS, MethodSpec, with_papers
from fed.runner import StageJob, run_tuning, select_point
from fed.stages import Stage
from fed.validate import check_config, schema_error

GRID = {"q": [0.0, 0.001, 0.01, 0.1, 1.0]}
MEAN = [80.0, 80.5, 79.6, 78.5, 60.0]  # validation local_acc_mean per q
VAR = [100.0, 98.0, 90.0, 70.0, 20.0]  # validation client_acc_variance per q
POOLED = [81.0, 79.0, 80.0, 77.0, 55.0]  # validation pooled_acc per q: every client's records as one set
SCORES = [
    {"q": q, "validation_local_acc_mean": m, "validation_client_acc_variance": v, "validation_pooled_acc": a,
     "diverged": False}
    for q, m, v, a in zip(GRID["q"], MEAN, VAR, POOLED)
]  # fmt: skip
AUTHORS = {"metric": "local_acc_mean", "tolerance": 1.0, "of": {"q": 0.0}}


def pick(scores=SCORES, **tune):
    return select_point(scores, TUNE_DEFAULTS | {"grid": GRID} | tune)["q"]


def test_each_rule_picks_the_point_computed_by_hand():
    assert pick() == 0.001  # highest mean: 80.5
    assert pick(select_by="client_acc_variance") == 1.0  # lowest variance, whatever the accuracy (20 at 60 %)
    # fairness rule: mean >= 80.0 - 1 = 79.0 → q ∈ {0, 0.001, 0.01}; lowest variance among them: 90 at q = 0.01
    assert pick(select_by="client_acc_variance", within=AUTHORS) == 0.01
    # the reference matters: 1.6 below q = 0's 80.0 admits q = 0.1 (78.5 ≥ 78.4), 1.6 below the best 80.5 does not
    assert pick(select_by="client_acc_variance", within=AUTHORS | {"tolerance": 1.6}) == 0.1
    assert pick(select_by="client_acc_variance", within={"metric": "local_acc_mean", "tolerance": 1.6}) == 0.01
    assert pick(select_by="client_acc_variance", within={"metric": "local_acc_mean", "tolerance": 0.0}) == 0.001
    # a variance constraint: at most 30 above the lowest (20) → only q = 1; at most 50 above → q ∈ {0.1, 1}
    assert pick(within={"metric": "client_acc_variance", "tolerance": 30.0}) == 1.0
    assert pick(within={"metric": "client_acc_variance", "tolerance": 50.0}) == 0.1  # q ∈ {0.1, 1}: best mean 78.5


def test_a_diverged_point_is_never_chosen_nor_a_reference():
    scores = copy.deepcopy(SCORES)
    scores[4] |= {"validation_local_acc_mean": None, "validation_client_acc_variance": None, "diverged": True}
    assert pick(scores, select_by="client_acc_variance") == 0.1
    scores[0] |= {"validation_local_acc_mean": None, "validation_client_acc_variance": None, "diverged": True}
    with pytest.raises(RuntimeError, match="reference point \\{'q': 0.0\\} diverged"):
        pick(scores, select_by="client_acc_variance", within=AUTHORS)
    with pytest.raises(RuntimeError, match="no grid point has finite validation"):
        pick([s | {"diverged": True} for s in SCORES])


@pytest.mark.parametrize("partition, chosen", [("multimodal", 0.01), ("unimodal", 0.001)])
def test_committed_records_still_select_what_they_chose(partition, chosen):
    """The FMNIST reference cells recorded local_acc_mean only: the default rule re-reads them unchanged (multimodal:
    78.87 at q = 0.01 > 78.54 at q = 0.001), and a rule that needs the variance says it is missing."""
    record = json.loads((REPO / f"reference/fmnist/runs/fedzda/fmnist/{partition}/qffl/seed0/metrics.json").read_text())
    tuning = record["tuning"]
    assert select_point(tuning["scores"], tuning["tune"])["q"] == chosen == record["method"]["params"]["q"]
    with pytest.raises(RuntimeError, match="no grid point has finite validation \\['client_acc_variance'"):
        select_point(tuning["scores"], tuning["tune"] | {"select_by": "client_acc_variance"})


class FakeRun:
    """An engine whose run returns fixed last-round metrics for its q (no training)."""

    LAST = {
        q: {"local_acc_mean": m, "client_acc_variance": v, "pooled_acc": a, "global_acc": 99.0,
            "class_acc_variance": 1.0}
        for q, m, v, a in zip(GRID["q"], MEAN, VAR, POOLED)
    }  # fmt: skip

    def __init__(self, method, rounds, validation_fraction, work_dir):
        assert rounds == 30 and validation_fraction == 0.1 and work_dir.name == f"q{method.params['q']}"
        self.q = method.params["q"]

    def run(self):
        if self.q == 1.0:
            nan = float("nan")
            return {"diverged": True, "last": {"local_acc_mean": nan, "client_acc_variance": nan, "pooled_acc": nan}}
        return {"diverged": False, "last": self.LAST[self.q]}


def test_the_stage_records_every_validation_metric_and_applies_the_rule(tmp_path):
    tune = {"grid": GRID, "rounds": 30, "select_by": "client_acc_variance", "within": AUTHORS}
    spec = MethodSpec.from_config("qffl", {"algorithm": "qffl", "lipschitz": 50.0, "tune": tune})
    job = StageJob(Stage.of("tuning", method="qffl"), "fmnist", tmp_path / "t.pt", None, FakeRun, spec, tmp_path)
    run_tuning(job)
    record = torch.load(tmp_path / "t.pt", weights_only=False)
    assert record["chosen"] == {"q": 0.01} and record["tune"] == TUNE_DEFAULTS | tune
    assert record["scores"][:4] == SCORES[:4]  # validation metrics only: global_acc reads the test set
    assert record["scores"][4] == {
        "q": 1.0,
        "validation_local_acc_mean": None,
        "validation_client_acc_variance": None,
        "validation_pooled_acc": None,
        "diverged": True,
    }


def test_pooled_validation_accuracy_picks_by_every_record_at_once():
    """The head-to-head protocol's rule (docs/headtohead-protocol.md): the validation analogue of global accuracy
    picks q = 0 (81.0 on every record at once) where the mean of the clients' accuracies picks q = 0.001 (80.5)."""
    assert pick(select_by="pooled_acc") == 0.0 and pick(select_by="local_acc_mean") == 0.001


BASE = with_papers(yaml.safe_load((REPO / "config.yaml").read_text()), REPO / "config/papers")


def checked(tune):
    cfg = copy.deepcopy(BASE)
    cfg["methods"]["qffl"]["tune"] = tune
    validate(cfg, str(REPO / "workflow/schemas/config.schema.yaml"))
    return check_config(cfg)


def test_the_authors_rule_is_a_valid_config_and_bad_rules_are_named():
    assert checked({"grid": GRID, "select_by": "client_acc_variance", "within": AUTHORS, "rounds": 30}) == []
    for tune, message in [
        ({"grid": GRID, "select_by": "global_acc"}, "tune: unknown select_by 'global_acc'; valid choices: \\["),
        ({"grid": GRID, "within": AUTHORS | {"metric": "acc"}}, "tune.within: unknown metric 'acc'"),
        ({"grid": GRID, "within": AUTHORS | {"of": {"q": 5.0}}}, "tune.within.of: \\{'q': 5.0\\} is not a point"),
        ({"grid": GRID, "within": AUTHORS | {"of": {"mu": 0.0}}}, "tune.within.of: \\{'mu': 0.0\\} is not a point"),
    ]:
        with pytest.raises(ValueError, match=message):
            checked(tune)
    for within, message in [
        ({"metric": "local_acc_mean"}, "'tolerance' is a required property"),
        (AUTHORS | {"tolerance": -1}, "-1 is less than the minimum of 0"),
        (AUTHORS | {"of": "worst"}, "'worst' is not valid under any of the given schemas"),
        (AUTHORS | {"margin": 1}, "Additional properties are not allowed"),
    ]:
        with pytest.raises(WorkflowError) as err:
            checked({"grid": GRID, "within": within})
        assert message in schema_error(err.value) and schema_error(err.value).startswith("methods.qffl.tune.within")


def test_a_local_setting_is_tuned_through_the_method_s_protocol(tmp_path):
    """``protocol.lr`` in a grid tunes the local learning rate (the head-to-head protocol tunes FedAvg's): each point
    runs with it in its protocol, and the cell runs with the chosen one."""
    from fed.runner import tuned

    seen = []

    class Run:
        def __init__(self, method, rounds, validation_fraction, work_dir):
            seen.append((method.params, method.protocol))
            self.lr = method.protocol["lr"]

        def run(self):
            last = {"local_acc_mean": 50.0, "client_acc_variance": 1.0, "pooled_acc": {0.01: 70.0, 0.05: 75.0}[self.lr]}
            return {"diverged": False, "last": last}

    tune = {"grid": {"protocol.lr": [0.01, 0.05]}, "rounds": 5, "select_by": "pooled_acc"}
    spec = MethodSpec.from_config("fedavg_t", {"algorithm": "fedavg", "protocol": {"momentum": 0.5}, "tune": tune})
    run_tuning(StageJob(Stage.of("tuning", method="fedavg_t"), "fmnist", tmp_path / "t.pt", None, Run, spec, tmp_path))
    assert seen == [({}, {"momentum": 0.5, "lr": 0.01}), ({}, {"momentum": 0.5, "lr": 0.05})]
    method, record = tuned(spec, {"tuning": tmp_path / "t.pt"})
    assert record["chosen"] == {"protocol.lr": 0.05}
    assert method.protocol == {"momentum": 0.5, "lr": 0.05} and method.params == {}
    assert checked({"grid": {"protocol.lr": [0.01, 0.05]}}) == []
    with pytest.raises(ValueError, match=r"protocol keys \['nope'\] are not local training settings"):
        checked({"grid": {"protocol.nope": [1, 2]}})


def test_a_tuning_after_another_runs_its_grid_at_that_tuning_s_choice(tmp_path):
    """The head-to-head protocol: FedAvg's tuning picks the lr; FedProx's runs each μ at that lr and its cell runs
    at both; a method without a knob (FedData) takes the lr alone, with no run."""
    from fed.runner import tuned

    seen = []

    class Run:
        def __init__(self, method, rounds, validation_fraction, work_dir):
            seen.append((method.name, method.params, method.protocol))
            self.point = (method.protocol.get("lr"), method.params.get("mu"))

        def run(self):
            pooled = {(0.01, None): 70.0, (0.05, None): 75.0, (0.05, 0.01): 76.0, (0.05, 1.0): 74.0}[self.point]
            last = {"local_acc_mean": 50.0, "client_acc_variance": 1.0, "pooled_acc": pooled}
            return {"diverged": False, "last": last}

    def job(name, spec, after=None):
        stage = Stage.of("tuning", method=name)
        return StageJob(stage, "fmnist", tmp_path / f"{name}.pt", None, Run, spec, tmp_path, None, after)

    lr = {"grid": {"protocol.lr": [0.01, 0.05]}, "select_by": "pooled_acc"}
    fedavg = MethodSpec.from_config("fedavg_t", {"algorithm": "fedavg", "tune": lr})
    run_tuning(job("fedavg_t", fedavg))
    mu = {"grid": {"mu": [0.01, 1.0]}, "select_by": "pooled_acc", "after": "fedavg_t"}
    fedprox = MethodSpec.from_config("fedprox_t", {"algorithm": "fedprox", "mu": 0.1, "tune": mu})
    run_tuning(job("fedprox_t", fedprox, after=tmp_path / "fedavg_t.pt"))
    assert seen[2:] == [
        ("fedprox_t-mu0.01", {"mu": 0.01}, {"lr": 0.05}),  # every μ at the lr FedAvg chose
        ("fedprox_t-mu1.0", {"mu": 1.0}, {"lr": 0.05}),
    ]
    method, record = tuned(fedprox, {"tuning": tmp_path / "fedprox_t.pt"})
    assert record["chosen"] == {"protocol.lr": 0.05, "mu": 0.01} and record["after"] == {"protocol.lr": 0.05}
    assert method.params == {"mu": 0.01} and method.protocol == {"lr": 0.05}
    feddata = MethodSpec.from_config("feddata_t", {"algorithm": "feddata", "tune": {"grid": {}, "after": "fedavg_t"}})
    run_tuning(job("feddata_t", feddata, after=tmp_path / "fedavg_t.pt"))
    assert len(seen) == 4 and tuned(feddata, {"tuning": tmp_path / "feddata_t.pt"})[0].protocol == {"lr": 0.05}


def test_a_tuning_after_another_is_checked():
    def with_fedavg(tune):
        cfg = copy.deepcopy(BASE)
        cfg["methods"]["fedavg_t"] = {"algorithm": "fedavg", "tune": {"grid": {"protocol.lr": [0.01, 0.05]}}}
        cfg["methods"]["qffl"]["tune"] = tune
        validate(cfg, str(REPO / "workflow/schemas/config.schema.yaml"))
        return check_config(cfg)

    assert with_fedavg({"grid": GRID, "after": "fedavg_t", "per_seed": True}) == []
    for tune, message in [
        ({"grid": {}}, "tune: an empty grid tunes nothing"),
        ({"grid": GRID, "after": "fedprox"}, "tune.after: 'fedprox' is not a configured method with `tune`"),
        ({"grid": GRID, "after": "qffl"}, "tune.after leads back to 'qffl'"),
    ]:
        with pytest.raises(ValueError, match=message):
            with_fedavg(tune)


def test_a_round_parameter_is_scaled_to_the_tuning_s_rounds():
    from fed.runner import scaled

    tune = {"grid": {"start_round": [12, 16, 18], "x": [3]}, "rounds": 6, "round_params": ["start_round"]}
    # 20 rounds → 6: 12 → 3.6 → 4, 16 → 4.8 → 5, 18 → 5.4 → 5; other parameters as they are
    assert [scaled({"start_round": v, "x": 3}, tune, 20)["start_round"] for v in (12, 16, 18)] == [4, 5, 5]
    assert scaled({"start_round": 1, "x": 3}, tune, 100) == {"start_round": 1, "x": 3}  # never before round 1
    assert scaled({"start_round": 16}, tune | {"round_params": []}, 20) == {"start_round": 16}
    assert scaled({"start_round": 16}, tune | {"rounds": None}, 20) == {"start_round": 16}  # the preset's rounds
    with pytest.raises(ValueError, match=r"tune.round_params: \['q0'\] are not grid parameters"):
        checked({"grid": GRID, "round_params": ["q0"]})


def test_a_method_whose_every_point_diverges_is_recorded_diverged_and_its_cell_trains_no_round(
    tmp_path, synthetic_root
):
    """docs/headtohead-protocol.md, 2.5: a method whose every grid point diverges is reported as diverged in that
    regime and seed, a result and not a gap. The stage records it (no choice, no error); the cell then trains no round
    and its metrics.json says it diverged before round 1 (FedDPMS under the shared SGD, 1 class a client, 2026-12-01:
    the stage failed before, and the protocol's FedDPMS cells could not run)."""
    from fed.config import FLConfig
    from fed.data.datasets import load_labels
    from fed.data.partition import make_partition
    from fed.leakage import audit_files
    from fed.runner import run_cell, tuned

    class Diverges(FakeRun):
        def run(self):
            nan = float("nan")
            return {"diverged": True, "last": {"local_acc_mean": nan, "client_acc_variance": nan, "pooled_acc": nan}}

    tune = {"grid": GRID, "rounds": 30, "select_by": "pooled_acc"}
    spec = MethodSpec.from_config("qffl", {"algorithm": "qffl", "lipschitz": 50.0, "tune": tune})
    stage = tmp_path / "t.pt"
    run_tuning(StageJob(Stage.of("tuning", method="qffl"), "fmnist", stage, None, Diverges, spec, tmp_path))
    record = torch.load(stage, weights_only=False)
    assert record["diverged"] and record["chosen"] == {} and all(s["diverged"] for s in record["scores"])
    assert tuned(spec, {"tuning": stage})[0].params == spec.params  # no point chosen: the configured values
    # one point that did not diverge is chosen as before, and the record says the method did not diverge
    run_tuning(StageJob(Stage.of("tuning", method="qffl"), "fmnist", tmp_path / "u.pt", None, FakeRun, spec, tmp_path))
    assert not torch.load(tmp_path / "u.pt", weights_only=False)["diverged"]

    part = tmp_path / "part.json"
    part.write_text(
        json.dumps(make_partition(load_labels("synthetic", synthetic_root), "label_quantity", 4, seed=0, k=2))
    )
    cfg = FLConfig(num_clients=4, fraction=0.5, rounds=3, local_epochs=1, batch_size=16, lr=0.01, model="cnn_mnist")
    out = run_cell(cfg, spec, "synthetic", synthetic_root, part, 0, tmp_path / "cell", stages={"tuning": stage},
                   progress=None)  # fmt: skip
    assert out["diverged"] and out["diverged_round"] == 0 and out["rounds_completed"] == 0 and out["history"] == []
    written = json.loads((tmp_path / "cell" / "metrics.json").read_text())
    assert written["diverged"] and written["tuning"]["diverged"] and written["last"]["global_acc"] is None
    # its audit: nothing left a client, so nothing is attacked (no benchmark of its job here: no cost either)
    cell = tmp_path / "cell"
    audited = audit_files(cell / "metrics.json", cell / "model.pt", synthetic_root, part, {"tuning": stage}, 1,
                          cell / "benchmark.tsv")  # fmt: skip
    assert audited["artifacts"] == {} and audited["trained_no_round"] and "jobs" not in audited
    assert audited["model_bytes"] == sum(v.nbytes for v in torch.load(cell / "model.pt").values())
