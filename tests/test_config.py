"""Bad configs fail before the DAG runs, with messages that name the problem and the valid choices."""

import copy
import re
import subprocess
import sys

import pytest
import yaml
from conftest import REPO, snakemake, write_yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import update_config, validate

from fed.config import FLConfig, resolve_preset, with_papers
from fed.validate import check_config, schema_error

SCHEMA = str(REPO / "workflow/schemas/config.schema.yaml")
BASE = with_papers(yaml.safe_load((REPO / "config.yaml").read_text()), REPO / "config/papers")


def checked(mutate):
    cfg = copy.deepcopy(BASE)
    mutate(cfg)
    validate(cfg, SCHEMA)
    return check_config(cfg)


def test_shipped_configs_are_valid(monkeypatch):
    for overlay in [
        "config/quick.yaml",
        "config/smoke.yaml",
        "config/fmnist.yaml",
        "config/dafl_quick.yaml",
        "config/feddpms_quick.yaml",
        "config/flea_quick.yaml",
    ]:
        cfg = yaml.safe_load((REPO / "config.yaml").read_text())
        update_config(cfg, yaml.safe_load((REPO / overlay).read_text()))  # as snakemake --configfile does
        cfg = with_papers(cfg, REPO / "config/papers")  # then the workflow merges the papers under it
        validate(cfg, SCHEMA)
        check_config(cfg)
    assert checked(lambda c: None) == []  # every method of the Fed-ZDA tables is implemented
    monkeypatch.setattr("fed.validate.PLANNED", {"fedfuture"})  # a method a config may name before it exists
    warnings = checked(
        lambda c: (
            c["methods"].update(fedfuture={"algorithm": "fedfuture"})
            or c["tables"]["fedzda_table1"]["methods"].append("fedfuture")
        )
    )
    assert any("'fedfuture' is not yet implemented" in w for w in warnings)


@pytest.mark.parametrize(
    "mutate, key, message",
    [
        (lambda c: c["presets"]["fedzda"].update(fraction=0), "presets.fedzda.fraction", "0 is less than or equal to"),
        (lambda c: c["presets"]["fedzda"].update(fraction=1.5), "presets.fedzda.fraction", "1.5 is greater than the"),
        (lambda c: c["presets"]["fedzda"].update(rounds=-3), "presets.fedzda.rounds", "-3 is less than the minimum"),
        (lambda c: c["partitions"].update(d={"scheme": "dirichlet", "beta": 0}), "partitions.d.beta", "0 is less"),
        (lambda c: c["presets"]["fedzda"].update(learning_rate=0.1), "presets.fedzda", "Additional properties are"),
        (lambda c: c["presets"]["fedzda"].update(aggregation="median"), "presets.fedzda.aggregation", "'median' is"),
        (lambda c: c.update(tracking_mode="sometimes"), "tracking_mode", "'sometimes' is not one of"),
    ],
)
def test_schema_rejects_out_of_range_values(mutate, key, message):
    with pytest.raises(WorkflowError, match=message) as err:
        checked(mutate)
    assert schema_error(err.value).startswith(f"{key}: {message}")  # what the workflow and `fed check` print


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda c: c["tables"]["fedzda_table1"]["methods"].append("fedsgd"),
            "unknown method 'fedsgd'; defined methods: \\['ccvr', 'ccvr_flea', 'centralized', 'dafl_gamma0.005'",
        ),
        (
            lambda c: c["methods"].update(fedsgd={"algorithm": "sgd"}),
            "unknown algorithm 'sgd'; valid choices: \\['ccvr', 'centralized', 'dafl', 'fedavg', 'fedavg_matched'",
        ),
        (
            lambda c: c["tables"]["fedzda_table1"]["datasets"].append("imagenet"),
            "unknown dataset 'imagenet'; valid choices: \\['cifar10', 'cifar100', 'fmnist', 'mnist', 'svhn'",
        ),
        (
            lambda c: (
                c["partitions"].update(shards={"scheme": "pathological"})
                or c["tables"]["fedzda_table1"]["partitions"].append("shards")
            ),
            "unknown scheme 'pathological'",
        ),
        (
            lambda c: (
                c["partitions"].update(q={"scheme": "label_quantity", "k": 11})
                or c["tables"]["fedzda_table1"]["partitions"].append("q")
            ),
            "k=11 > 10 classes of mnist",
        ),
        (lambda c: c["methods"]["fedprox"].update(nu=1), "unknown parameter 'nu' of fedprox; valid: \\['mu'\\]"),
        (lambda c: c["presets"]["fedzda"].update(model="resnet9000"), "unknown model 'resnet9000'"),
        (  # a method sets how its clients train, never the protocol every method shares
            lambda c: c["methods"]["fedprox"].update(protocol={"rounds": 5}),
            "method 'fedprox': protocol keys \\['rounds'\\] are not local training settings",
        ),
        (lambda c: c["methods"]["fedprox"].update(protocol={"lr": "fast"}), "protocol: lr='fast' is not int or float"),
    ],
)
def test_names_are_checked_against_registries(mutate, message):
    with pytest.raises(ValueError, match=message):
        checked(mutate)


def test_preset_inheritance_and_unknown_keys():
    presets = {"a": {"rounds": 100, "lr": 0.1}, "b": {"base": "a", "rounds": 5}}
    assert resolve_preset(presets, "b") == {"rounds": 5, "lr": 0.1}
    with pytest.raises(ValueError, match="circular"):
        resolve_preset({"a": {"base": "b"}, "b": {"base": "a"}}, "a")
    with pytest.raises(ValueError, match="preset: unknown keys \\['epochs'\\]"):
        FLConfig.from_preset({"epochs": 3}, "mnist")


def test_snakemake_refuses_bad_config_before_any_job(tmp_path):
    bad = write_yaml(tmp_path / "bad.yaml", {"tables": {"fedzda_table1": {"methods": ["fedavg", "fedsgd"]}}})
    proc = snakemake(tmp_path, "-n", "--configfile", str(bad), check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "invalid config:" in out and "unknown method 'fedsgd'; defined methods:" in out
    assert "Traceback" not in out
    assert not (tmp_path / "results").exists()


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "fed.cli", "run", *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--set", "rounds=0"], "at least one round"),
        (["--set", "lr=abc"], "lr='abc' is not int or float"),
        (["--param", "mu=abc"], "mu='abc' is not float"),
        (["--param", "nu=1"], "unknown parameter 'nu'"),
    ],
)
def test_fed_run_rejects_bad_settings_before_training(tmp_path, args, message):
    proc = run_cli(
        "synthetic", str(tmp_path / "none.json"), "fedprox", "--preset", "fedzda", "-o", str(tmp_path), *args
    )
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]


def test_fed_run_needs_a_complete_protocol(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("rounds: 3\n")
    proc = run_cli("synthetic", "p.json", "fedavg", "--preset", str(empty), "-o", str(tmp_path))
    assert proc.returncode == 2 and "the protocol must be stated; missing ['num_clients (or avg_client_size)'" in (
        proc.stderr
    )


def test_preset_without_its_protocol_is_rejected_before_any_job(tmp_path):
    """A preset that omits a protocol key does not silently get Fed-ZDA's (or any) defaults."""
    bad = write_yaml(
        tmp_path / "bad.yaml", {"presets": {"thin": {"rounds": 3}}, "tables": {"fedzda_table1": {"preset": "thin"}}}
    )
    proc = snakemake(tmp_path, "-n", "--configfile", str(bad), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "preset 'thin': the protocol must be stated; missing" in out, out[-3000:]


def test_yaml_errors_name_the_file_and_line(tmp_path):
    from fed.config import load_yaml

    bad = tmp_path / "bad.yaml"
    bad.write_text("presets:\n  a: {rounds: 3\n")
    with pytest.raises(ValueError, match=r"invalid YAML in .*bad.yaml, line 3"):
        load_yaml(bad)


def test_unknown_metric_and_paper_file_are_rejected(tmp_path):
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    from fed.config import with_papers

    choices = "\\['dafl', 'feddpms', 'fedzda', 'flea', 'headtohead'\\]"
    with pytest.raises(ValueError, match=f"unknown paper 'fedzdaa'; valid choices: {choices}"):
        with_papers(cfg | {"papers": ["fedzdaa"]}, REPO / "config/papers")
    full = with_papers(cfg, REPO / "config/papers")
    full["tables"]["fedzda_table1"]["metrics"] = ["global_accuracy"]
    with pytest.raises(ValueError, match="unknown metric 'global_accuracy'; valid choices"):
        check_config(full)


@pytest.mark.parametrize(
    "mutate,message",
    [
        (
            lambda f: f["fedzda_fig5"].update(strat_rounds=[80]),
            "unknown key 'strat_rounds' for kind start_round_variance",
        ),
        (lambda f: f["fedzda_fig5"].update(start_rounds=[80, 101]), "starts at round 101, past the last round (100)"),
        (lambda f: f["fedzda_fig5"].update(method="fedzdx"), "unknown method 'fedzdx'"),
        (lambda f: f["fedzda_fig3"]["source"].update(partition="shards"), "unknown partition 'shards'"),
        (lambda f: f["fedzda_fig4"].update(kind="zsdg_grid"), "unknown kind 'zsdg_grid'; valid choices"),
        (lambda f: f["fedzda_fig3"].pop("oracle"), "missing key 'oracle'"),
    ],
)
def test_figure_keys_and_cells_are_checked_before_any_job(mutate, message):
    with pytest.raises(ValueError, match=message.replace("(", "\\(").replace(")", "\\)")):
        checked(lambda c: mutate(c["figures"]))


def test_a_table_cell_that_would_start_after_its_last_round_is_rejected():
    msg = "table 'fedzda_table1': method 'fedzdac' starts at round 80, past the last round \\(12\\) of preset 'q'"
    with pytest.raises(ValueError, match=msg):
        checked(
            lambda c: (
                c["presets"].update(q={"base": "fedzda", "rounds": 12}),
                c["tables"]["fedzda_table1"].update(preset="q"),
            )
        )


@pytest.mark.parametrize(
    "tune,message",
    [
        ({"grid": {"q": [0.1]}, "select_by": "val_acc"}, "tune: unknown select_by 'val_acc'"),
        ({"grid": {"qq": [0.1]}}, "unknown parameter 'qq' of qffl"),
        ({"grid": {"q": [0.1]}, "rounds": 101}, "method 'qffl' tunes for 101 rounds, more than preset 'fedzda' runs"),
    ],
)
def test_tuning_grid_and_metric_are_checked(tune, message):
    with pytest.raises(ValueError, match=message):
        checked(lambda c: c["methods"]["qffl"].update(tune=tune))


def test_a_table_of_an_unknown_paper_is_rejected_unless_it_says_it_has_no_published_numbers():
    with pytest.raises(ValueError, match="no published numbers for paper 'fedzdaa'"):
        checked(lambda c: c["tables"]["fedzda_table1"].update(paper="fedzdaa"))

    def own_table(c):  # a table of our own (its paper's claims would read another paper's table: drop them)
        c["tables"]["fedzda_table1"].update(paper="mine", published=False)
        c["claims"] = {}

    assert checked(own_table) == []


def test_fed_check_names_the_file_and_line_snakemake_does_not(tmp_path):
    """Snakemake says only "Config file is not valid JSON or YAML" for a broken overlay; `fed check` says where."""
    bad = tmp_path / "overlay.yaml"
    bad.write_text("presets:\n  a: {rounds: 3\n")
    proc = subprocess.run([sys.executable, "-m", "fed.cli", "check", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and f"invalid YAML in {bad}, line 3" in proc.stderr
    ok = subprocess.run(
        [sys.executable, "-m", "fed.cli", "check", str(REPO / "config/smoke.yaml")], capture_output=True, text=True
    )
    assert ok.returncode == 0 and "config ok" in ok.stdout
    bad.write_text("tracking_mode: sometimes\n")  # a schema error: the key and the reason, not the schema
    proc = subprocess.run([sys.executable, "-m", "fed.cli", "check", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "tracking_mode: 'sometimes' is not one of ['live', 'batch']" in proc.stderr


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda c: c["partitions"]["unimodal"].update(shard_per_client=2), "unexpected keyword argument 'shard_per"),
        (lambda c: c["partitions"]["multimodal"].update(classes_per_mode=50), "5 shares given for 0 modes"),
        # 100 clients x 700 shards: more shards than samples (a preset's 70,000 clients would fail the same way, after
        # partitioning every other scheme into 70,000 clients: ≈ 40 s)
        (lambda c: c["partitions"]["unimodal"].update(shards_per_client=700), "cannot fill 70000 single-class shards"),
    ],
)
def test_partition_typos_and_impossible_values_fail_before_any_job(mutate, message):
    with pytest.raises(ValueError, match=message):
        checked(mutate)


@pytest.mark.parametrize("where, name", [("tables", "fedzda_table1"), ("figures", "fedzda_fig5")])
def test_a_seed_listed_twice_is_rejected_before_any_job(where, name):
    """A table or figure would count the run of a repeated seed twice in its means and tests over seeds."""
    kind = where.removesuffix("s")
    with pytest.raises(ValueError, match=rf"{kind} '{name}': seeds \[0, 0, 1\] list seed 0 more than once"):
        checked(lambda c: c[where][name].update(seeds=[0, 0, 1]))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["presets"]["fedzda"].update(lr=float("nan")), "presets.fedzda.lr: nan is not a finite number"),
        (lambda c: c["partitions"]["dir0.5"].update(beta=float("inf")), "partitions.dir0.5.beta: inf is not a finite"),
        (lambda c: c["methods"]["fedprox"].update(mu=float("nan")), "methods.fedprox.mu: nan is not a finite number"),
        (
            lambda c: c["methods"]["fedprox"].update(protocol={"lr": float("-inf")}),
            "methods.fedprox.protocol.lr: -inf is not a finite number",
        ),
    ],
)
def test_non_finite_numbers_are_rejected_before_any_job(mutate, message):
    """YAML's .nan and .inf pass the schema's ranges (every comparison with NaN is false): a preset's lr of .nan
    would diverge at round 1. An infinite method parameter stays allowed (DA-FL's ε = .inf: no noise)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        checked(mutate)


@pytest.mark.parametrize(
    "overlay, message",
    [
        ("presets: {fedzda: {lr: 1.0e6}}", "presets.fedzda.lr: '1.0e6' is not of type 'number'"),
        ("methods: {fedprox: {mu: 1e-2}}", "fedprox: mu='1e-2' is not float"),
    ],
)
def test_a_number_yaml_reads_as_text_says_how_to_write_it(tmp_path, overlay, message):
    """PyYAML follows YAML 1.1, where 1.0e6 and 1e-2 are strings (a float needs a dot and a signed exponent)."""
    from fed.validate import checked_files

    path = tmp_path / "overlay.yaml"
    path.write_text(overlay + "\n")
    written = overlay.split(": ")[-1].rstrip("}")
    right = {"1.0e6": "1.0e+6 or 1000000.0", "1e-2": "1.0e-2 or 0.01"}[written]
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        checked_files([path], REPO)
    assert f"YAML reads {written} as text: write {right}" in str(err.value)


def test_a_dirichlet_beta_too_small_for_the_clients_is_rejected_before_any_job():
    """β → 0 gives each class to one client: 10 classes cannot fill 100 clients. The partition check says so
    (NumPy's "repeats may not contain negative values" before the partitioner drew again when the balance mask
    removed a class's whole draw)."""
    with pytest.raises(ValueError, match=r"no draw gave every client >= 10 samples .* raise beta or lower min_size"):
        checked(
            lambda c: (
                c["partitions"].update(tiny={"scheme": "dirichlet", "beta": 1e-6}),
                c["tables"]["fedzda_table1"].update(partitions=["tiny"], datasets=["synthetic"]),  # 2000 samples
            )
        )


def test_fed_check_of_a_missing_file_is_one_line_naming_it(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fed.cli", "check", str(tmp_path / "missing.yaml")], capture_output=True, text=True
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"fed check: no config file {tmp_path / 'missing.yaml'}" in proc.stderr


def test_fed_run_refuses_a_partition_made_for_another_number_of_clients(synthetic_root, tmp_path):
    """A 10-client partition under a 100-client preset would train, and record num_clients: 100."""
    import json

    from fed.data.datasets import load_labels
    from fed.data.partition import make_partition

    part = tmp_path / "part.json"
    part.write_text(json.dumps(make_partition(load_labels("synthetic", synthetic_root), "iid", 10, seed=0)))
    out = tmp_path / "out"
    fast = ["--set", "rounds=1", "--set", "local_epochs=1"]  # what runs today: 1 round
    proc = run_cli(
        "synthetic", str(part), "fedavg", "--root", str(synthetic_root), "--preset", "fedzda", "-o", str(out), *fast
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"partition file {part} was made for 10 clients; the settings have num_clients=100" in proc.stderr
    assert not (out / "metrics.json").exists()


def test_canonical_sorts_keys_at_every_depth_and_keeps_sequences_in_order():
    from fed.config import canonical

    spec = {"tau": 0.5, "algorithm": "moon", "protocol": {"lr": 0.1, "epochs": 2}, "sweep": {"mu": [1.0, 0.1]}}
    out = canonical(spec)
    assert list(out) == ["algorithm", "protocol", "sweep", "tau"] and list(out["protocol"]) == ["epochs", "lr"]
    assert out["sweep"]["mu"] == [1.0, 0.1] and out == spec  # the same content, lists in their order
    reordered = {"sweep": {"mu": [1.0, 0.1]}, "protocol": {"epochs": 2, "lr": 0.1}, "algorithm": "moon", "tau": 0.5}
    assert repr(canonical(reordered)) == repr(out)  # what Snakemake compares a job's params by
    assert canonical(({"b": 1, "a": 2},)) == ({"a": 2, "b": 1},) and canonical(None) is None


def test_sweep_variants_and_tuning_points_do_not_depend_on_the_yamls_key_order():
    from fed.config import MethodSpec, sweep_variants

    one = sweep_variants("m", {"algorithm": "fedbr", "sweep": {"tau": [0.5, 0.1], "lam_con": [1.0, 2.0]}})
    other = sweep_variants("m", {"sweep": {"lam_con": [1.0, 2.0], "tau": [0.5, 0.1]}, "algorithm": "fedbr"})
    assert (
        list(one)
        == list(other)
        == ["m-lam_con1.0-tau0.5", "m-lam_con1.0-tau0.1", "m-lam_con2.0-tau0.5", "m-lam_con2.0-tau0.1"]
    )
    assert one == other and one["m-lam_con2.0-tau0.1"] == {"algorithm": "fedbr", "lam_con": 2.0, "tau": 0.1}
    grids = [{"tau": [0.5, 0.1], "protocol.lr": [0.01]}, {"protocol.lr": [0.01], "tau": [0.5, 0.1]}]
    points = [MethodSpec.from_config("m", {"algorithm": "fedlc", "tune": {"grid": g}}).grid() for g in grids]
    assert points[0] == points[1] == [{"protocol.lr": 0.01, "tau": 0.5}, {"protocol.lr": 0.01, "tau": 0.1}]
    assert [list(p) for p in points[1]] == [["protocol.lr", "tau"]] * 2


def test_a_table_without_a_title_gets_its_paper_and_label_as_one():
    from fed.validate import checked_config

    table = {"paper": "mine", "table": "T2", "output": "mine/t2", "preset": "fedzda", "datasets": ["synthetic"],
             "partitions": ["iid"], "methods": ["fedavg"], "metrics": ["global_acc"], "seeds": [0],
             "published": False}  # fmt: skip
    titled = dict(table, output="mine/t3", title="Mine")
    config = copy.deepcopy(yaml.safe_load((REPO / "config.yaml").read_text()))
    config["tables"] = {"t2": table, "t3": titled}
    checked, _ = checked_config(config, REPO)
    assert checked["tables"]["t2"]["title"] == "mine T2" and checked["tables"]["t3"]["title"] == "Mine"
    assert "title" not in table  # the caller's config stays as it is
