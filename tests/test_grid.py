"""The grid (fed.grid) without Snakemake: what a config expands to — cells, sweeps, figure variants, stages and their
chains, the cell → paper map, committed cells and the targets of `rule all`. tests/test_workflow.py runs the same
grid through Snakemake; scripts/dag_jobs.py dumps Snakemake's job list to compare two commits."""

import json
import shutil
import subprocess
import sys

import pytest
from conftest import REPO

from fed.config import load_yaml
from fed.grid import Grid
from fed.validate import checked_config


@pytest.fixture(scope="module")
def fmnist():
    return Grid.from_files([REPO / "config/fmnist.yaml"], REPO)


@pytest.fixture(scope="module")
def smoke():
    return Grid.from_files([REPO / "config/smoke.yaml"], REPO)


def test_fmnist_paper_scale_has_36_cells_30_of_the_tables_and_6_of_fig5(fmnist):
    """Tables 1-2 share 5 methods × 2 partitions × 3 seeds; Fig. 5 adds Fed-ZDAC starting at 90 and 95 (its start
    at 80 is the tables' Fed-ZDAC, not a seventh method)."""
    assert len(fmnist.cell_paper) == 36
    table = {tuple(c.values()) for t in fmnist.config["tables"].values() for c in fmnist.table_cells(t)}
    assert len(table) == 30
    figure = {tuple(c.values()) for c in fmnist.figure_cells(fmnist.config["figures"]["fedzda_fig5"])}
    assert len(figure - table) == 6
    assert {k[3] for k in figure - table} == {"fedzdac-start90", "fedzdac-start95"}
    assert set(fmnist.cell_paper.values()) == {"fedzda"}


def test_a_figure_variant_equal_to_a_method_is_that_method(fmnist):
    assert fmnist.alias == {"fedzdac-start80": "fedzdac"}
    assert "fedzdac-start80" not in fmnist.config["methods"]
    methods = [c["method"] for c in fmnist.figure_cells(fmnist.config["figures"]["fedzda_fig5"])]
    assert methods == ["fedzdac"] * 3 + ["fedzdac-start90"] * 3 + ["fedzdac-start95"] * 3
    assert fmnist.config["methods"]["fedzdac-start90"] == fmnist.config["methods"]["fedzdac"] | {"start_round": 90}


def test_fedavg_prefixes_chain_79_89_94_and_each_cell_continues_from_the_longest_below_its_start(fmnist):
    key = ("fedzda", "fmnist", "multimodal", 1)
    prefixes = {n: s for n, s in fmnist.stages[key].items() if s.kind == "fedavg_prefix"}
    assert sorted(prefixes) == ["fedavg_prefix-rounds79", "fedavg_prefix-rounds89", "fedavg_prefix-rounds94"]
    stages = "results/stages/fedzda/fmnist/multimodal/seed1"
    assert "lower" not in fmnist.stage_inputs(key, "fedavg_prefix-rounds79")
    assert fmnist.stage_inputs(key, "fedavg_prefix-rounds89")["lower"] == f"{stages}/fedavg_prefix-rounds79.pt"
    assert fmnist.stage_inputs(key, "fedavg_prefix-rounds94")["lower"] == f"{stages}/fedavg_prefix-rounds89.pt"
    assert fmnist.train_stages(key, "fedzdac") == {"stage_warm": f"{stages}/fedavg_prefix-rounds79.pt"}
    assert fmnist.train_stages(key, "fedzdac-start95") == {"stage_warm": f"{stages}/fedavg_prefix-rounds94.pt"}
    assert fmnist.train_stages(key, "fedavg") == {"stage_warm": f"{stages}/fedavg_prefix-rounds94.pt"}
    # the unimodal partition has no start-round variants: one prefix, at 79
    assert list(fmnist.stages[("fedzda", "fmnist", "unimodal", 1)]) == ["fedavg_prefix-rounds79"]


def test_without_warm_start_no_prefix_is_a_job(tmp_path):
    config = load_yaml(REPO / "config.yaml") | {"warm_start": "false"}  # as --config warm_start=false gives it
    config["papers"] = ["fedzda"]
    grid = Grid(checked_config(config, REPO)[0], REPO)
    assert grid.config["warm_start"] is False
    assert not [s for stages in grid.stages.values() for s in stages.values() if s.kind == "fedavg_prefix"]
    assert grid.train_stages(("fedzda", "mnist", "multimodal", 0), "fedzdac") == {}


def test_a_tuning_stage_runs_once_on_seed_0_for_every_seed(fmnist):
    for seed in (0, 1, 2):
        key = ("fedzda", "fmnist", "unimodal", seed)
        assert fmnist.train_stages(key, "qffl") == {
            "stage_tuning": "results/stages/fedzda/fmnist/unimodal/seed0/tuning-methodqffl.pt"
        }
    assert fmnist.stage_method(("fedzda", "fmnist", "unimodal", 0), "tuning-methodqffl") == "qffl"
    assert fmnist.stage_algorithm(("fedzda", "fmnist", "unimodal", 0), "tuning-methodqffl") == "qffl"
    assert fmnist.stage_algorithm(("fedzda", "fmnist", "unimodal", 0), "fedavg_prefix-rounds79") == "fedavg"


def test_a_swept_method_is_one_cell_per_grid_point_and_the_table_knows_its_variants(smoke):
    table = smoke.config["tables"]["baselines"]
    assert smoke.sweeps["fedprox_best"] == ["fedprox_best-mu0.001", "fedprox_best-mu1.0"]
    methods = {c["method"] for c in smoke.table_cells(table)}
    assert {"fedprox_best-mu0.001", "fedprox_best-mu1.0"} <= methods and "fedprox_best" not in methods
    assert smoke.config["methods"]["fedprox_best-mu1.0"] == {"algorithm": "fedprox", "mu": 1.0}
    assert {"fedprox_best-mu0.001", "fedprox_best-mu1.0"} <= set(smoke.implemented())


def test_the_grid_leaves_the_config_it_is_given_as_it_is():
    given = load_yaml(REPO / "config.yaml")
    before = json.dumps(given, sort_keys=True)
    config, _ = checked_config(given, REPO)
    assert json.dumps(given, sort_keys=True) == before  # Snakemake's own config is not rewritten
    before = json.dumps(config, sort_keys=True)
    grid = Grid(config, REPO)
    assert json.dumps(config, sort_keys=True) == before
    assert set(grid.config["methods"]) > set(config["methods"])  # the variants live in the grid's copy


def test_a_cell_belongs_to_the_first_paper_that_asks_for_it_and_every_target_is_listed(smoke):
    assert set(smoke.cell_paper.values()) <= set(smoke.config["papers"]) | {"baselines"}
    outputs = smoke.table_outputs()
    assert len(outputs) == len(set(outputs))
    for name in smoke.tables:
        assert {f"reports/tables/{name}.{ext}" for ext in ("csv", "md", "html")} <= set(outputs)
    for paper in smoke.claim_papers:
        assert f"reports/tables/{paper}/claims.csv" in outputs
        assert set(smoke.claim_sources(paper).values()) <= set(outputs) | {
            f"reports/figures/{f}.csv" for f in smoke.figures
        }
    assert outputs[-3:] == [f"reports/summary.{ext}" for ext in ("rst", "md", "html")]
    assert smoke.figure_outputs() == [f"reports/figures/{f}.png" for f in smoke.figures]
    assert all(p.startswith("reports/figures/partitions/") for p in smoke.partition_figures())
    papers = sorted(set(smoke.cell_paper.values()))
    assert smoke.tracking_outputs() == [f"results/mlflow/{p}.logged.tsv" for p in papers]  # tracking_mode: batch


def test_batch_tracking_logs_only_the_papers_that_train_a_cell():
    config, _ = checked_config(load_yaml(REPO / "config.yaml") | {"tracking_mode": "batch"}, REPO)
    grid = Grid(config, REPO)
    assert grid.tracking_outputs() == [f"results/mlflow/{p}.logged.tsv" for p in sorted(set(grid.cell_paper.values()))]
    assert Grid(config | {"tracking_mode": "live"}, REPO).tracking_outputs() == []  # each job logs its own cell


def test_committed_cells_are_read_while_current_and_recomputed_when_stale(tmp_path):
    """A cell under reference_dir is read instead of trained while the config gives it the settings it ran with;
    change one and the grid points at results/ again, saying why once."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "config", repo / "config")
    shutil.copytree(REPO / "workflow/schemas", repo / "workflow/schemas")
    shutil.copy(REPO / "config.yaml", repo / "config.yaml")
    rel = "runs/fedzda/fmnist/multimodal/fedavg/seed0"
    shutil.copytree(REPO / "reference/fmnist" / rel, repo / "reference/fmnist" / rel)
    warnings = []
    grid = Grid.from_files([repo / "config/fmnist.yaml"], repo, warn=warnings.append)
    assert grid.cell_path("fedzda", "fmnist", "multimodal", "fedavg", 0) == str(
        repo / "reference/fmnist" / rel / "metrics.json"
    )
    assert (
        grid.cell_path("fedzda", "fmnist", "multimodal", "fedavg", 0, committed=False) == f"results/{rel}/metrics.json"
    )
    assert (
        grid.cell_path("fedzda", "fmnist", "multimodal", "fedavg", 1)
        == "results/runs/fedzda/fmnist/multimodal/fedavg/seed1/metrics.json"
    )
    assert grid.trained_cells("fedzda")  # the other 35 cells and the ones figures read with their models
    assert f"results/{rel}/metrics.json" not in [p for p in grid.trained_cells("fedzda") if "fig" in p]
    assert warnings == []

    (repo / "stale.yaml").write_text("presets: {fedzda: {lr: 0.05}}\n")
    stale = Grid.from_files([repo / "config/fmnist.yaml", repo / "stale.yaml"], repo, warn=warnings.append)
    for _ in range(2):
        assert stale.cell_path("fedzda", "fmnist", "multimodal", "fedavg", 0) == f"results/{rel}/metrics.json"
    assert len(warnings) == 1 and "settings ['lr']" in warnings[0]


def test_a_bad_config_is_an_error_naming_the_key_before_any_grid_is_built():
    config = load_yaml(REPO / "config.yaml") | {"train_threads": 0}
    with pytest.raises(ValueError, match="train_threads"):
        checked_config(config, REPO)
    config = load_yaml(REPO / "config.yaml") | {"tables": {"fedzda_table1": {"partitions": ["nope"]}}}
    with pytest.raises(ValueError, match="unknown partition 'nope'"):
        checked_config(config, REPO)


def test_snakemake_plans_exactly_the_cells_and_stages_of_the_grid(smoke, tmp_path):
    """The rules are thin over the grid: Snakemake's train jobs are the grid's cells, its stage jobs the grid's
    stages, and each train job reads the stages the grid names for it."""
    out = subprocess.run(
        [
            sys.executable,
            REPO / "scripts/dag_jobs.py",
            "-s",
            REPO / "Snakefile",
            "-d",
            tmp_path,
            "--configfile",
            REPO / "config/smoke.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    jobs = json.loads(out)
    train = {
        tuple(j["wildcards"][k] for k in ("preset", "dataset", "partition", "method", "seed")): j
        for j in jobs
        if j["rule"] == "train"
    }
    assert set(train) == {(p, d, part, m, str(s)) for p, d, part, m, s in smoke.cell_paper}
    stages = {
        (
            j["wildcards"]["preset"],
            j["wildcards"]["dataset"],
            j["wildcards"]["partition"],
            int(j["wildcards"]["seed"]),
            j["wildcards"]["stage"],
        )
        for j in jobs
        if j["rule"] == "stage"
    }
    assert stages == {(*key, name) for key, named in smoke.stages.items() for name in named}
    for (p, d, part, m, s), job in train.items():
        key = (p, d, part, int(s))
        assert set(job["input"]) - {smoke.data_path(d), smoke.partition_path(*key)} == {
            *smoke.train_stages(key, m).values(),
            f"results/mlflow/{smoke.cell_paper[(p, d, part, m, int(s))]}.ready",
        }


def test_a_tuning_per_seed_after_another_reads_that_tuning_of_its_own_seed(tmp_path):
    """The head-to-head protocol's tuning: every seed, and q-FFL's (here) after FedAvg's lr of the same seed."""
    overlay = tmp_path / "tuned.yaml"
    overlay.write_text(
        "methods:\n"
        "  fedavg_t: {algorithm: fedavg, tune: {grid: {protocol.lr: [0.01, 0.02]}, per_seed: true}}\n"
        "  qffl: {tune: {grid: {q: [0.0, 0.1]}, after: fedavg_t, per_seed: true}}\n"
    )
    grid = Grid.from_files([REPO / "config/fmnist.yaml", overlay], REPO)
    key = ("fedzda", "fmnist", "unimodal", 1)
    stages = "results/stages/fedzda/fmnist/unimodal/seed1"
    assert grid.train_stages(key, "qffl") == {"stage_tuning": f"{stages}/tuning-methodqffl-per_seedTrue.pt"}
    assert grid.stage_inputs(key, "tuning-methodqffl-per_seedTrue")["after"] == (
        f"{stages}/tuning-methodfedavg_t-per_seedTrue.pt"
    )
    assert "tuning-methodfedavg_t-per_seedTrue" in grid.stages[key]  # a job, though no table lists fedavg_t
    assert "after" not in grid.stage_inputs(key, "tuning-methodfedavg_t-per_seedTrue")
