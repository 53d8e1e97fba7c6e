"""A committed reference cell stands for the config only while it was run with the config's settings."""

from fed.config import FLConfig
from fed.reference import stale_reasons

CONFIG = {"rounds": 10, "lr": 0.01, "lr_decay": 1.0, "note": "", "optimizer": "sgd"}
PART = {"scheme": "dirichlet", "beta": 0.1, "subsample": 0.1}


def record(**changes):
    rec = {
        "config": dict(CONFIG),
        "method": {"name": "fedprox", "algorithm": "fedprox", "params": {"mu": 0.01}},
        "partition": {"scheme": "dirichlet", "params": {"beta": 0.1, "subsample": 0.1}, "num_clients": 10},
    }
    for key, value in changes.items():
        rec[key] = value
    return rec


def reasons(rec, config=CONFIG, params=None, part=PART, tune=None):
    return stale_reasons(rec, config, "fedprox", {"mu": 0.01} if params is None else params, part, None, tune)


def test_a_cell_run_with_the_config_s_settings_is_current():
    assert reasons(record()) == []
    assert reasons(record(), config={**CONFIG, "note": "a new caption"}) == []  # labels change no number
    assert reasons(record(), config={**CONFIG, "report": "best"}) == []  # metrics.json holds last and best rounds


def test_any_changed_setting_method_parameter_or_partition_makes_it_stale():
    assert reasons(record(), config={**CONFIG, "lr": 0.02}) == ["settings ['lr']"]
    assert reasons(record(), params={"mu": 0.1}) == ["method parameters"]
    assert reasons(record(), part={**PART, "subsample": 0.2}) == ["partition"]
    assert reasons(record(), part={"scheme": "iid"}) == ["partition"]


def test_settings_a_record_predates_count_as_their_defaults():
    defaults = FLConfig.defaults()
    config = {**defaults, **CONFIG}
    old = record(config={k: v for k, v in config.items() if k != "lr_decay"})
    assert stale_reasons(old, config, "fedprox", {"mu": 0.01}, PART, defaults) == []  # lr_decay 1.0 is the default
    decayed = {**config, "lr_decay": 0.98}
    assert stale_reasons(old, decayed, "fedprox", {"mu": 0.01}, PART, defaults) == ["settings ['lr_decay']"]


def test_a_tuned_cell_is_compared_without_the_point_it_chose_and_with_its_tuning():
    tune = {"grid": {"mu": [0.1, 0.01]}, "rounds": 5}
    rec = record(method={"name": "fedprox_t", "algorithm": "fedprox", "params": {"mu": 0.1}}, tuning={"tune": tune})
    assert reasons(rec, params={}, tune=tune) == []
    assert reasons(rec, params={}, tune={**tune, "rounds": 30}) == ["tuning"]


def test_infinities_compare_as_metrics_json_stores_them():
    rec = record(method={"name": "d", "algorithm": "fedprox", "params": {"mu": 0.01, "epsilon": None}})
    assert reasons(rec, params={"mu": 0.01, "epsilon": float("inf")}) == []


def test_a_tuned_local_setting_is_compared_without_the_value_it_chose():
    """A tuning of FedAvg's lr (``protocol.lr``) records the chosen lr in the cell's settings: the cell stays current
    for the config that tuned it, and stale for one that fixes another lr without tuning it."""
    tune = {"grid": {"protocol.lr": [0.01, 0.05]}, "rounds": 5}
    rec = record(config={**CONFIG, "lr": 0.05}, tuning={"tune": tune})
    assert reasons(rec, tune=tune) == []
    assert reasons(record(config={**CONFIG, "lr": 0.05})) == ["settings ['lr']"]
    # tune.after: the lr another method's tuning chose (the head-to-head protocol's shared lr) is tuned too
    after = {"grid": {"mu": [0.1, 1.0]}, "after": "p_fedavg"}
    rec = record(config={**CONFIG, "lr": 0.05}, tuning={"tune": after, "after": {"protocol.lr": 0.05}})
    assert reasons(rec, params={}, tune=after) == []
    before = record(config={**CONFIG, "lr": 0.05}, tuning={"tune": after})  # a record without what it started from
    assert reasons(before, params={}, tune=after) == ["settings ['lr']"]


def test_how_a_cell_was_computed_changes_no_setting_it_is_compared_on():
    """The device, the batched path and CUDA's kernel choice change rounding only (as another CPU does)."""
    for key, value in (("device", "cuda"), ("vectorise", True), ("deterministic", False)):
        assert reasons(record(config={**CONFIG, key: value})) == [], key
