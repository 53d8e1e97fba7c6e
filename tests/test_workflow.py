"""The workflow end to end: the smoke config through Snakemake, the full config as a dry run, MLflow under load."""

import ast
import json
import re
import shutil
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
import torch
from conftest import REPO, snakemake, write_yaml

from fed.config import load_yaml
from fed.grid import Grid
from fed.tracking import init_store


def job_counts(stdout: str) -> dict[str, int]:
    """Snakemake's 'Job stats' table as {rule: count}."""
    table = stdout.split("Job stats:")[1].split("\n\n")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.M)}


def test_a_forked_dry_run_reads_as_a_fresh_process_s(tmp_path):
    """conftest.snakemake forks dry runs from a preloaded server (tests/forked.py): same exit code, same jobs, the same
    error where a target has no producer, the caller's working directory."""
    smoke = ("--configfile", str(REPO / "config/smoke.yaml"))
    argv = ["-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "-n", *smoke]
    fresh = subprocess.run([sys.executable, "-m", "snakemake", *argv], capture_output=True, text=True, cwd=tmp_path)
    forked = snakemake(tmp_path, "-n", *smoke)
    assert fresh.returncode == forked.returncode == 0 and job_counts(forked.stdout) == job_counts(fresh.stdout)
    assert f"Run directory: {tmp_path}" in forked.stdout
    missing = snakemake(tmp_path, "-n", *smoke, "--", "reports/no_such_table.csv", check=False)
    assert missing.returncode == 1 and "MissingRuleException" in missing.stdout + missing.stderr


def test_full_config_dry_run_has_a_producer_for_every_output(tmp_path):
    counts = job_counts(snakemake(tmp_path, "-n").stdout)
    # Tables 1-2: 3 datasets x 2 partitions x 5 methods x 3 seeds = 90 cells, shared by both tables; Fig. 4 three
    # ResNet34 models; Fig. 5 starts at 90 and 95 x 3 seeds (its start at 80 is the tables' Fed-ZDAC cell, Fig. 3's
    # FL models are table cells, its oracles stages)
    fedzda = 90 + 3 + 6
    # DA-FL Table 3: 13 cells per (dataset, partition, seed) — FedAvg, FedProx x 4 mu, SCAFFOLD, FedNova, FedMix x 3
    # lambda, DA-FL x 2 gamma, centralized — on MNIST/FMNIST x 3 partitions and SVHN/CIFAR-10 x 2, 3 seeds; Table 4
    # four more eps0 and Fig. 6 two more gamma on MNIST (Table 4: 1-Label; Fig. 6: 1- and 2-Label); Figs. 4 and 7 read
    # table cells
    dafl = 13 * (2 * 3 + 2 * 2) * 3 + 4 * 3 + 2 * 2 * 3
    # FedDPMS: 5 methods x 5 beta x 3 datasets x 3 seeds; the preliminary-rounds ablation adds P = 15 and 25 (FMNIST
    # beta = 0.5 as the authors ran it, 3 seeds; P = 20 and the baselines are the table's cells)
    feddpms = 5 * 5 * 3 * 3 + 2 * 3
    # FLea Table 1: 3 datasets x 2 scarcity blocks x 3 partitions x 11 methods x 5 seeds; Figs. 6 and 9 read its cells;
    # Fig. 2: 3 scarcity levels x 5 methods x 5 seeds (CIFAR-10 IID); Figs. 10-11: 12 FLea variants x 5 seeds (the
    # sweeps' a = 2, lambda1 = 1 with lambda2 = 3 is the table's FLea cell); Fig. 9(c): lambda2 = 0 on CIFAR-10 Qua(3);
    # Fig. 6 (right): FedMix at 3 and FLea at 3 smaller shares x 5 seeds (full shares, FedAvg: UrbanSound8K table cells)
    flea = 3 * 2 * 3 * 11 * 5 + 3 * 5 * 5 + 12 * 5 + 5 + 6 * 5
    assert counts["train"] == fedzda + dafl + feddpms + flea
    # figures: Fed-ZDA 3, DA-FL 4, FedDPMS 6 (with the P ablation's per-round curves), FLea 3 + Fig. 2 (3 panels)
    # + Figs. 10, 11 (left), 11 (right: 2) + 7-8
    # + 9(c) + 3 + 9(d) + 6 (right)
    assert counts["table"] == 2 + 4 + 4 + 6 and counts["figure"] == 3 + 4 + 6 + 3 + 3 + 4 + 1 + 1 + 1 + 1 + 1
    # The FedAvg prefix to round 79 (where the tables' Fed-ZDA cells start) once per dataset x partition x seed,
    # Fig. 5's prefixes to 89 and 94 chained on it (FMNIST multimodal x 3 seeds), Fig. 3's three oracles, and
    # q-FFL's selection of q once per dataset x partition (on seed 0, for every seed); DA-FL's GANs once per
    # (dataset, partition, eps0, seed), shared by every gamma: Table 3's 10 (dataset, partition) and Table 4's four
    # other budgets, x 3 seeds
    # FedDPMS' Stage I once per (dataset, partition, seed, P), shared by every noise level: 3 datasets x 5 beta x 3
    # seeds at P = 20, and P = 15, 25 on FMNIST beta = 0.5
    feddpms_stages = 3 * 5 * 3 + 2 * 3
    # FLea: FedProx's mu and FedLC's tau chosen on held-out client data per (block, dataset, partition), on seed 0;
    # Figs. 9(c)-(d) attack the global models after rounds 1 and 10 of FLea with and without dCor, 5 seeds
    flea_stages = 2 * 3 * 2 * 3 + 2 * 2 * 5
    assert counts["stage"] == 3 * 2 * 3 + 2 * 3 + 3 + 3 * 2 + (10 + 4) * 3 + feddpms_stages + flea_stages
    assert counts["prepare_data"] == 7 and counts["mlflow_init"] == 4  # + UrbanSound8K, UCI-HAR; + FLea


def test_flea_quick_config_dry_run(tmp_path):
    quick = ("--configfile", str(REPO / "config/flea_quick.yaml"))
    out = snakemake(tmp_path, "-n", *quick, "--config", "reference_dir=null").stdout
    counts = job_counts(out)
    # Table 1's CIFAR-10 columns on the Fashion-MNIST stand-in: 2 blocks x 3 partitions x 10 methods (no FedData) x 2
    # seeds; the tuning of FedProx and FedLC per (block, partition); Figs. 6, 7-8 and 9(a, b) read table cells,
    # Fig. 9(c) adds FLea without dCor (Qua(3), |D_k| = 100, 2 seeds); Figs. 9(c)-(d) attack both FLeas' models
    # after rounds 1 and 10 (a model_at stage each)
    assert counts["train"] == 2 * 3 * 10 * 2 + 2 and counts["stage"] == 2 * 2 * 3 + 2 * 2 * 2
    assert counts["table"] == 2 and counts["figure"] == 6 and counts["claims"] == 1 and counts["prepare_data"] == 1
    assert "partitions/flea_quick_d50/fmnist/flea_dir0.1/seed1.json" in out and "data/cifar10" not in out
    # tracking_mode: batch: one job logs the paper's cells at the end
    assert counts["mlflow_log"] == 1 and counts["mlflow_init"] == 1
    # the measured run's cells are committed: tables, figures and claims rebuild from them; only the cells not
    # committed train, and the four whose models Figs. 9(c, d) attack (weights are never committed)
    committed = set(json.loads((REPO / "reference/flea_quick/MANIFEST.json").read_text())["cells"])
    # the sweeps and scarcity overlays' cells: below
    committed = {c for c in committed if c.split("/")[0].startswith("flea_quick_d") and c.split("/")[3] not in SWEEPS}
    counts = job_counts(snakemake(tmp_path, "-n", *quick).stdout)
    attacked = {f"flea_quick_d100/fmnist/qua3/{m}/seed{s}" for m in ("flea", "flea_l1_1") for s in (0, 1)}
    assert len(committed) <= 122 and counts.get("train", 0) == 122 - len(committed) + len(attacked & committed)


# FLea's sweeps beyond the quick config's cells: α and FedMix's share (Fig. 6, right), Beta(a, a) (Fig. 10), λ1 with
# λ2 = 0 and λ2 with λ1 = 1 (Fig. 11)
SWEEPS = {
    *("flea_s0.01", "flea_s0.02", "flea_s0.05", "fedmix_s0.1", "fedmix_s0.2", "fedmix_s0.5"),
    *("flea_a0.5", "flea_a1", "flea_a5", "flea_a10"),
    *("flea_l1_0", "flea_l1_2", "flea_l1_4", "flea_l1_8", "flea_l2_1", "flea_l2_6", "flea_l2_10"),
}


def test_flea_sweeps_overlay_dry_run(tmp_path):
    both = ("--configfile", str(REPO / "config/flea_quick.yaml"), str(REPO / "config/flea_sweeps_quick.yaml"))
    out = snakemake(tmp_path, "-n", *both, "--config", "reference_dir=null").stdout
    counts = job_counts(out)
    # the quick config's 122 cells, and each sweep method on Qua(3), |D_k| ≈ 100, 2 seeds; FedAvg (the reference
    # band), FedMix, FLea and FLea with λ2 = 0 are quick cells already; five more figures
    assert counts["train"] == 122 + len(SWEEPS) * 2 and counts["figure"] == 6 + 5
    assert all(f"runs/flea_quick_d100/fmnist/qua3/{m}/seed1/metrics.json" in out for m in SWEEPS)


def test_flea_scarcity_overlay_dry_run(tmp_path):
    both = ("--configfile", str(REPO / "config/flea_quick.yaml"), str(REPO / "config/flea_scarcity_quick.yaml"))
    out = snakemake(tmp_path, "-n", *both, "--config", "reference_dir=null").stdout
    counts = job_counts(out)
    # Fig. 2's four methods (no FedData) at |D_k| = 5000, 500, 100 on Fashion-MNIST IID, one seed; Fig. 3 reads
    # FedAvg's cells of (a) and (c); four more figures, three more partitions (12, 120 and 600 clients)
    assert counts["train"] == 122 + 3 * 4 and counts["figure"] == 6 + 4 and counts["partition"] == 12 + 3
    for size in (5000, 500, 100):
        assert all(f"runs/flea_scarcity_quick_{size}/fmnist/iid/{m}/seed0/" in out for m in ("fedavg", "fedmix"))
        assert f"partitions/flea_scarcity_quick_{size}/fmnist/iid/seed0.json" in out
    assert "data/cifar10" not in out
    # its 12 cells are committed: only Fig. 3's two FedAvg cells retrain (it reads their models)
    counts = job_counts(snakemake(tmp_path, "-n", *both).stdout)
    committed = json.loads((REPO / "reference/flea_quick/MANIFEST.json").read_text())["cells"]
    assert sum(c.startswith("flea_scarcity_quick_") for c in committed) == 12
    retrained = snakemake(tmp_path, "-n", *both, "--", "reports/figures/flea/fig3_separability.png").stdout
    quick_alone = snakemake(tmp_path, "-n", "--configfile", str(REPO / "config/flea_quick.yaml")).stdout
    assert job_counts(retrained)["train"] == 2 and counts["train"] == job_counts(quick_alone)["train"] + 2


def test_dafl_quick_config_dry_run(tmp_path):
    quick = ("--configfile", str(REPO / "config/dafl_quick.yaml"))
    counts = job_counts(snakemake(tmp_path, "-n", *quick, "--config", "reference_dir=null").stdout)
    # Table 3's FMNIST column (13 cells x 3 partitions), Table 4's four other eps0 and Fig. 6's two other gamma on
    # 1-Label; GANs for 3 partitions at eps0 = 50 and 1-Label at the four other budgets
    assert counts["train"] == 13 * 3 + 4 + 2 and counts["stage"] == 3 + 4
    assert counts["table"] == 2 and counts["figure"] == 4 and counts["prepare_data"] == 1
    # the measured run's cells are committed: tables rebuild without training; Figs. 5 and 7 still need the GANs
    committed = json.loads((REPO / "reference/dafl_quick/MANIFEST.json").read_text())["cells"]
    counts = job_counts(snakemake(tmp_path, "-n", *quick).stdout)
    assert len(committed) == 45 and "train" not in counts and counts["stage"] == 3 + 4


def test_feddpms_quick_config_dry_run(tmp_path):
    quick = ("--configfile", str(REPO / "config/feddpms_quick.yaml"))
    counts = job_counts(snakemake(tmp_path, "-n", *quick, "--config", "reference_dir=null").stdout)
    # 5 methods x 3 beta, and P = 1, 2 at beta = 0.1 (P = 3 is the table's cell); one Stage I per (beta, P)
    assert counts["train"] == 5 * 3 + 2 and counts["stage"] == 3 + 2
    assert counts["table"] == 2 and counts["figure"] == 3 and counts["prepare_data"] == 1
    # the measured run's cells are committed: only the samples figure, which decodes with a cell's model, trains
    # (that cell and its Stage I)
    committed = json.loads((REPO / "reference/feddpms_quick/MANIFEST.json").read_text())["cells"]
    counts = job_counts(snakemake(tmp_path, "-n", *quick).stdout)
    assert len(committed) == 17 and counts["train"] == 1 and counts["stage"] == 1


def test_dafl_fmnist_column_rebuilds_from_its_committed_cells(tmp_path):
    """config/dafl_fmnist.yaml: every cell of its tables is committed under reference/dafl_fmnist, so a fresh checkout
    rebuilds Table 3's FMNIST column, Fig. 4's label-skew panels and the two claims without training (issue 42);
    without the reference it trains all 13 a partition (FedProx's four μ, FedMix's three λ, DA-FL's two γ) and the
    three partitions' GAN stages."""
    args = ("--configfile", str(REPO / "config/dafl_fmnist.yaml"))
    counts = job_counts(snakemake(tmp_path, "-n", *args, "--config", "reference_dir=null").stdout)
    assert (counts["train"], counts["stage"]) == ((4 + 4 + 3 + 2) * 3, 3)
    counts = job_counts(snakemake(tmp_path, "-n", *args).stdout)
    assert "train" not in counts and "stage" not in counts and (counts["table"], counts["figure"]) == (1, 1)
    # the width study's cells are committed too (config/dafl_fmnist_width.yaml: FedAvg at half and a quarter width,
    # and the quarter at 2-Label at three seeds)
    counts = job_counts(snakemake(tmp_path, "-n", *args, str(REPO / "config/dafl_fmnist_width.yaml")).stdout)
    assert "train" not in counts and counts["table"] == 4
    # and the seed studies' (config/dafl_fmnist_seeds.yaml: FedAvg, SCAFFOLD, FedNova and the centralized bound at all
    # three partitions, FedProx's four μ at Dir(0.05), run seeds 1 and 2 beside Table 3's seed 0; ten studies' tables
    # and one of the four baselines, whose FedProx row at 1- and 2-Label is the FedProx overlay's; three figures of
    # curves)
    counts = job_counts(snakemake(tmp_path, "-n", *args, str(REPO / "config/dafl_fmnist_seeds.yaml")).stdout)
    assert "train" not in counts and (counts["table"], counts["figure"]) == (12, 4)


@pytest.mark.parametrize(
    "overlays, finished",
    [
        (("config/dafl_fmnist_fedmix_taylor.yaml",), {"dafl_fedmix_taylor", "dafl_fedmix_taylor_2label_dir"}),
        (("config/dafl_fmnist_gan_loss.yaml",), {"dafl_gan_loss"}),
        (
            ("config/dafl_fmnist_gan_loss.yaml", "config/dafl_fmnist_gan_loss_dir.yaml"),
            {"dafl_gan_loss", "dafl_gan_loss_dir"},
        ),
        (("config/dafl_fmnist_scaffold_diag.yaml",), {"dafl_scaffold_diag"}),
        (
            ("config/dafl_fmnist_fedprox_seeds.yaml",),
            {"dafl_fedprox_seeds_2label", "dafl_fedprox_seeds_1label"},
        ),
        (
            ("config/dafl_fmnist_dafl_seeds.yaml",),
            {"dafl_dafl_seeds_label", "dafl_claims_seeds", "dafl_dafl_seeds_dir"},
        ),
        (
            ("config/dafl_fmnist_gan_loss.yaml", "config/dafl_fmnist_gan_loss_seeds.yaml"),
            {"dafl_gan_loss", "dafl_gan_loss_seeds"},
        ),
    ],
    ids=["fedmix_taylor", "gan_loss", "gan_loss_dir", "scaffold_diag", "fedprox_seeds", "dafl_seeds", "gan_loss_seeds"],
)
def test_dafl_ablations_train_only_what_reference_lacks(overlays, finished, tmp_path):
    """Each DA-FL ablation (issue 42, its reading fixed in its overlay before its cells ran) trains exactly its own
    tables' cells not committed under reference/dafl_fmnist, and a GAN stage only for a DA-FL cell among them: a
    fresh checkout rebuilds a finished ablation's table (``finished``: every cell committed) without training, and
    an unfinished one plans only its rest."""
    configs = [REPO / "config/dafl_fmnist.yaml", *(REPO / c for c in overlays)]
    grid = Grid.from_files(configs, REPO)
    own = {name: grid.config["tables"][name] for c in configs[1:] for name in load_yaml(c)["tables"]}
    missing = {
        name: {
            (c["partition"], c["method"], c["seed"])
            for c in grid.table_cells(table)
            if not grid.reference_is_current(c["preset"], c["dataset"], c["partition"], c["method"], c["seed"])
        }
        for name, table in own.items()
    }
    assert not any(missing[name] for name in finished), missing
    missing = set().union(*missing.values())
    counts = job_counts(snakemake(tmp_path, "-n", "--configfile", *map(str, configs)).stdout)
    assert counts.get("train", 0) == len(missing)
    stages = {(p, s) for p, m, s in missing if grid.algorithm(m) == "dafl"}  # one GAN stage a partition and seed
    assert counts.get("stage", 0) == len(stages)
    assert counts.get("table", 0) >= len(own)


def test_feddpms_fmnist_trains_only_what_reference_lacks(tmp_path):
    """config/feddpms_fmnist.yaml (the β = 0.5 pair, β = 0.1's and 0.2's FedDPMS, FedAvg and FedProx) and its chart
    overlay: without a reference they train the chart's 25 cells and the preliminary-rounds ablation's 2 more
    (P = 15, 25), with one Stage I a β and one a P (issue 42); with reference/feddpms_fmnist a fresh checkout trains
    only the cells not committed there, so the tables rebuild without training once their 8 cells are in."""
    args = ("--configfile", str(REPO / "config/feddpms_fmnist.yaml"))
    chart = (*args, str(REPO / "config/feddpms_fmnist_chart.yaml"))
    counts = job_counts(snakemake(tmp_path, "-n", *args, "--config", "reference_dir=null").stdout)
    assert (counts["train"], counts["stage"]) == (8, 3)  # FedDPMS' Stage I at β = 0.5, 0.1 and 0.2
    counts = job_counts(snakemake(tmp_path, "-n", *chart, "--config", "reference_dir=null").stdout)
    assert (counts["train"], counts["stage"]) == (5 * 5 + 2, 5 + 2)
    manifest = REPO / "reference/feddpms_fmnist/MANIFEST.json"
    committed = json.loads(manifest.read_text())["cells"] if manifest.exists() else {}
    cells = {f"feddpms/fmnist/dir0.5/{m}/seed0" for m in ("fedavg", "feddpms")}
    cells |= {f"feddpms/fmnist/{p}/feddpms/seed0" for p in ("dir0.1", "dir0.2")}
    cells |= {f"feddpms/fmnist/{p}/{m}/seed0" for p in ("dir0.1", "dir0.2") for m in ("fedavg", "fedprox_mu0.001")}
    assert job_counts(snakemake(tmp_path, "-n", *args).stdout).get("train", 0) == len(cells - set(committed))


def test_feddpms_fmnist_figure_puts_the_committed_cells_beside_the_authors_chart(tmp_path):
    """config/feddpms_fmnist.yaml's accuracy-vs-β figure (docs/img/feddpms_fmnist_acc_vs_beta.png) rebuilds from
    reference/feddpms_fmnist without training: our FedAvg and FedDPMS at the β run, each its committed best round,
    beside the chart's FedAvg and FedDPMS at all five β (fed/reporting/data/feddpms.csv)."""
    args = ("--configfile", str(REPO / "config/feddpms_fmnist.yaml"), "--until", "figure")
    assert "rule train:" not in snakemake(tmp_path, "-n", *args).stdout
    snakemake(tmp_path, "--cores", "1", *args)
    fig = pd.read_csv(tmp_path / "reports/figures/feddpms/acc_vs_beta_fmnist.csv")
    runs = REPO / "reference/feddpms_fmnist/runs/feddpms/fmnist"
    ours = fig[fig.role == "sweep"].set_index(["method", "partition"]).global_acc.to_dict()
    assert ours == {
        (m, p): json.loads((runs / p / m / "seed0/metrics.json").read_text())["best"]["global_acc"] for m, p in ours
    }
    assert sorted(ours) == [(m, p) for m in ("fedavg", "feddpms") for p in ("dir0.1", "dir0.2", "dir0.5")]
    chart = fig[fig.role == "paper"].set_index(["method", "x"]).global_acc.to_dict()
    read_off = {"fedavg": [79.5, 82.72, 83.87, 84.29, 84.73], "feddpms": [82.06, 85.67, 86.11, 86.57, 87.56]}
    assert chart == {(m, x): acc for m, accs in read_off.items() for x, acc in zip([0.1, 0.2, 0.3, 0.4, 0.5], accs)}


def markdown_row(text: str, first: str) -> list[str]:
    """The cells of the Markdown table row whose first cell starts with ``first``."""
    rows = [line.strip("| ").split(" | ") for line in text.splitlines() if line.startswith(f"| {first}")]
    assert len(rows) == 1, f"{len(rows)} rows start with {first!r}"
    return [cell.strip() for cell in rows[0]]


# each paper's committed cells at its protocol: the overlays that read them, its row in results.md and README
PAPER_PROTOCOL = {
    "fedzda": ("Fed-ZDA", ("config/fmnist.yaml", "config/fmnist_committed.yaml")),
    "dafl": ("DA-FL", ("config/dafl_fmnist.yaml",)),
    "feddpms": ("FedDPMS", ("config/feddpms_fmnist.yaml",)),
}


@pytest.fixture(scope="module")
def protocol_reports(tmp_path_factory):
    """Each paper's report summary (rule summary) rebuilt from its committed cells without training, once for the
    tests below (one xdist group): paper → its working directory."""
    reports = {}
    for paper, (_, overlays) in PAPER_PROTOCOL.items():
        workdir = reports[paper] = tmp_path_factory.mktemp(paper)
        args = ("--configfile", *(str(REPO / c) for c in overlays), "--until", "summary")
        assert "rule train:" not in snakemake(workdir, "-n", *args).stdout  # every cell of its tables is committed
        snakemake(workdir, "--cores", "1", *args)
        assert not (workdir / "results").exists()  # nothing trained
    return reports


@pytest.mark.xdist_group("protocol_reports")
@pytest.mark.parametrize("paper", PAPER_PROTOCOL)
def test_results_summary_and_readme_status_are_the_reports_counts(paper, protocol_reports):
    """docs/results.md's summary table, README's status table and docs/usage.md's "Status in detail" count the cells
    that the report's own summary page (rule summary, fed.reporting.summary) counts when it is rebuilt from the
    committed cells without training: a cell committed, a verdict moved or a table added fails here until all three
    are updated from that page (issue 42)."""
    name, _ = PAPER_PROTOCOL[paper]
    per_paper = (protocol_reports[paper] / "reports/summary.md").read_text().split("Per table:")[0]
    page = markdown_row(per_paper, f"{paper} ")
    cells, reproduced, above, below, not_comparable, no_paper = map(int, page[1:7])
    summary = (REPO / "docs/results.md").read_text().split("## Summary")[1].split("\n## ")[0]
    assert markdown_row(summary, f"{name} ")[1:] == page[1:7]
    status = markdown_row((REPO / "README.md").read_text(), f"[{name}]")[2]
    assert f"{reproduced} of {cells} reproduced, {above} above, {below} below" in status, status
    assert not (not_comparable or no_paper) or f"{not_comparable} not comparable, {no_paper} no paper value" in status
    detail = (REPO / "docs/usage.md").read_text().split("## Status in detail")[1].split(f"### {name}\n")[1]
    detail = detail.split("\n### ")[0]
    assert f"{reproduced} of {cells} table cells reproduced, {above} above, {below} below" in detail, detail


@pytest.mark.xdist_group("protocol_reports")
def test_the_readme_first_picture_is_every_compared_cell_of_the_committed_protocols(protocol_reports, tmp_path):
    """README's first picture (docs/img/summary.png) draws the points of the three summaries above (each report's
    reports/figures/summary.csv, rule summary): every cell they count as reproduced, above or below, and no other.
    To refresh the picture: FEDREPRO_PICTURES=1 python -m pytest tests/test_workflow.py -k first_picture."""
    import os

    from fed.reporting.figures import plot_verdict_deltas
    from fed.reporting.summary import COMPARED

    frames = []
    for paper, workdir in protocol_reports.items():
        cells = pd.read_csv(workdir / "reports/figures/summary.csv")
        counts = markdown_row((workdir / "reports/summary.md").read_text().split("Per table:")[0], f"{paper} ")
        drawn = cells.verdict.value_counts()
        assert [drawn.get(v, 0) for v in COMPARED] == list(map(int, counts[2:5])), paper
        assert cells.delta.tolist() == pytest.approx((cells.ours_mean - cells.paper_value).tolist())
        assert (workdir / "reports/figures/summary.png").stat().st_size > 5000
        frames.append(cells)
    cells = pd.concat(frames, ignore_index=True)
    assert set(cells.paper) == set(PAPER_PROTOCOL) and "Table 3" in set(cells.label)  # the paper's own table names
    picture = tmp_path / "summary.png"
    title = "Every table cell compared with a paper at its protocol (the committed cells): ours − paper, by verdict"
    plot_verdict_deltas(cells, picture, title)
    if os.environ.get("FEDREPRO_PICTURES"):
        shutil.copyfile(picture, REPO / "docs/img/summary.png")


def test_quick_config_dry_run(tmp_path):
    counts = job_counts(snakemake(tmp_path, "-n", "--configfile", str(REPO / "config/quick.yaml")).stdout)
    assert counts["train"] == 30 + 1 + 2 + 6 and counts["prepare_data"] == 1 and counts["figure"] == 3


def test_fmnist_config_dry_run_lists_the_paper_scale_grid(tmp_path):
    fmnist = ("--configfile", str(REPO / "config/fmnist.yaml"))
    out = snakemake(tmp_path, "-n", *fmnist, "--config", "reference_dir=null").stdout
    counts = job_counts(out)
    # FMNIST x 2 partitions x 5 methods x 3 seeds, and Fig. 5's starts at 90 and 95 x 3 seeds; no Fig. 4 (CIFAR-10)
    assert counts["train"] == 30 + 6 and counts["figure"] == 2 and counts["prepare_data"] == 1
    # the cells committed under reference/fmnist are read from there, not trained; Fig. 3 still trains the one FL
    # model it inverts (multimodal FedAvg, seed 0), since model weights are never committed
    committed = json.loads((REPO / "reference/fmnist/MANIFEST.json").read_text())["cells"]
    fig3_model = "fedzda/fmnist/multimodal/fedavg/seed0" in committed
    assert job_counts(snakemake(tmp_path, "-n", *fmnist).stdout)["train"] == 36 - len(committed) + fig3_model
    if len(committed) == 36:  # the tables rebuild from the committed cells alone
        tables = ("reports/tables/fedzda/table1.csv", "reports/tables/fedzda/table2.csv")
        assert "train" not in job_counts(snakemake(tmp_path, "-n", *tables, *fmnist).stdout)
    assert "results/runs/fedzda/fmnist/multimodal/fedzdac-start95/seed2/metrics.json" in out
    assert "cifar10" not in out


@pytest.mark.slow
def test_smoke_run_dafl_end_to_end(smoke_run):
    """DA-FL through Snakemake: GAN stages, cells, verdicts, claims, Figs. 4, 5 and 7 and the privacy ledger."""
    tmp_path, _ = smoke_run
    t3 = pd.read_csv(tmp_path / "reports/tables/dafl/table3.csv")
    assert sorted(t3.method) == ["dafl_gamma0.01", "dafl_gamma0.05", "fedavg"] and (t3.seeds == 2).all()
    assert (t3.verdict == "no paper value").all()  # synthetic data: never compared with the paper's MNIST
    claims = pd.read_csv(tmp_path / "reports/tables/dafl/claims.csv")
    assert len(claims) == 3 and claims.setting.str.startswith("not comparable").all()
    fig5 = pd.read_csv(tmp_path / "reports/figures/dafl/fig5.csv")
    assert list(fig5.epsilon0) == [1.0, 50.0, float("inf")] and list(fig5.steps) == [0, 1, 1]  # no step fits ε0 = 1
    fig7 = pd.read_csv(tmp_path / "reports/figures/dafl/fig7.csv")
    assert set(fig7.stage) == {"FL", "GAN (sum over clients)", "GAN (slowest client)"}
    assert (fig7.dropna(subset=["ratio_to_fl"]).ratio_to_fl > 0).all()
    for fig in ("fig4", "fig5", "fig7"):
        assert (tmp_path / f"reports/figures/dafl/{fig}.png").stat().st_size > 5000
    cell = json.loads(
        (tmp_path / "results/runs/smoke_dafl/synthetic/1-label/dafl_gamma0.01/seed0/metrics.json").read_text()
    )
    ledger = cell["shared"]
    assert ledger["epsilon_total"] == pytest.approx(ledger["epsilon_gan"] + 1.0) and ledger["delta"] == 1e-5
    assert "raw_samples" not in ledger
    inf_cell = tmp_path / "results/runs/smoke_dafl/synthetic/1-label/dafl_gamma0.01_epsinf/seed0/metrics.json"
    assert json.loads(inf_cell.read_text())["shared"]["epsilon_gan"] == "inf"


@pytest.mark.slow
def test_smoke_run_flea_end_to_end(smoke_run):
    """FLea through Snakemake: the buffer's ledger and history, a stand-in table beside the CIFAR-10 numbers it stands
    in for (every verdict not comparable), the exposure figure and the claims over several tables."""
    tmp_path, _ = smoke_run
    table = pd.read_csv(tmp_path / "reports/tables/flea/table1_cifar10_d100.csv")
    assert sorted(set(table.method)) == ["fedavg", "flea"] and set(table.partition) == {"qua3"}
    assert table.verdict.str.startswith("not comparable (smoke config").all()
    fedavg_qua3 = table[(table.method == "fedavg") & (table.partition == "qua3")].iloc[0]
    assert fedavg_qua3.paper_value == 30.25 and fedavg_qua3.seeds == 2  # CIFAR-10, |D_k| = 100 block
    cell = json.loads((tmp_path / "results/runs/smoke_flea/synthetic/qua3/flea/seed0/metrics.json").read_text())
    assert cell["shared"]["features"] > 0 and "raw_samples" not in cell["shared"]
    rows = cell["history"]
    assert "flea_buffer_size" not in rows[0] and rows[1]["flea_buffer_size"] > 0  # round 1 has no buffer
    exposure = pd.read_csv(tmp_path / "reports/figures/flea/fig9a_exposure.csv")
    assert sorted(exposure["round"].unique()) == [1, 2, 3]
    assert (exposure.sort_values("round").groupby("seed").flea_exposure.diff().dropna() >= 0).all()  # ξ only grows
    dcor = pd.read_csv(tmp_path / "reports/figures/flea/fig9b_dcor.csv")
    assert dcor.flea_dcor_shared.between(0, 1).all() and sorted(dcor["round"]) == [2, 3]
    claims = pd.read_csv(tmp_path / "reports/tables/flea/claims.csv")
    assert list(claims.claim) == ["flea_beats_best_baseline", "flea_best_everywhere"]
    assert claims.setting.str.startswith("not comparable").all()


@pytest.mark.slow
def test_smoke_run_feddpms_end_to_end(smoke_run):
    """FedDPMS through Snakemake: Stage I stages shared by cells, DPMS, the ledger, tables, figures and claims."""
    tmp_path, _ = smoke_run
    acc = pd.read_csv(tmp_path / "reports/tables/feddpms/fmnist.csv")
    assert sorted(set(acc.method)) == ["fedavg", "feddpms"] and set(acc.partition) == {"dir0.1", "dir0.5"}
    assert (acc.verdict == "no paper value").all()  # the authors' charts have no synthetic column
    stages = sorted(p.name for p in (tmp_path / "results/stages/smoke_dpms/synthetic").rglob("*.pt"))
    assert stages == ["vae_prelim-rounds2-vae_weight0.05.pt"] * 2  # one Stage I per partition, shared by its cells
    fig = pd.read_csv(tmp_path / "reports/figures/feddpms/acc_vs_beta_fmnist.csv")
    assert sorted(fig.x.unique()) == [0.1, 0.5] and (fig.report == "best").all()
    claims = pd.read_csv(tmp_path / "reports/tables/feddpms/claims.csv")
    assert list(claims.claim) == ["feddpms_beats_baselines_small_beta"]
    assert (claims.verdict == "inconclusive").all()  # one seed: no test can decide
    cell = json.loads((tmp_path / "results/runs/smoke_dpms/synthetic/dir0.1/feddpms/seed0/metrics.json").read_text())
    ledger, history = cell["shared"], cell["history"]
    assert [r["round"] for r in history] == [1, 2, 3] and cell["best"]["round"] in (1, 2, 3)  # Stage I rounds kept
    assert ledger["decoders"] == 10 and ledger["noisy_latent_means"] == sum(history[2]["dpms_uploaded"])
    assert ledger["epsilon_classical_per_release"] == pytest.approx(0.7769, abs=1e-4)
    assert ledger["epsilon_exact"] >= ledger["epsilon_exact_per_release"] > 0 and "raw_samples" not in ledger
    assert (tmp_path / "reports/figures/feddpms/samples.png").stat().st_size > 5000
    privacy = pd.read_csv(tmp_path / "reports/tables/feddpms/privacy_smoke_dpms.csv")
    dpms = privacy[privacy.method == "feddpms"]
    assert (dpms.decoders == 10).all() and (dpms.epsilon_classical_per_release.round(4) == 0.7769).all()
    assert privacy[privacy.method == "fedavg"].decoders.isna().all()  # FedAvg shares only model updates


@pytest.mark.slow
def test_smoke_run_produces_tables_and_mlflow_runs(smoke_run):
    tmp_path, _ = smoke_run
    t1 = pd.read_csv(tmp_path / "reports/tables/fedzda/table1.csv")
    assert set(t1.metric) == {"local_acc_mean", "client_acc_variance"}
    # the smoke data are ours: no paper value, and never a "reproduced"
    assert len(t1) == 2 * 5 * 2 and (t1.verdict == "no paper value").all() and (t1.seeds == 2).all()
    acc, var = t1[t1.metric == "local_acc_mean"], t1[t1.metric == "client_acc_variance"]
    assert acc.ours_mean.between(0, 100).all() and var.ours_mean.between(0, 2500).all()  # 2500: max over [0, 100]
    for ext in ("md", "html"):
        text = (tmp_path / f"reports/tables/fedzda/table2.{ext}").read_text()
        assert "smoke config: synthetic data" in text and "global_acc" in text
    assert (tmp_path / "reports/figures/partitions/smoke/synthetic/multimodal/seed0.png").stat().st_size > 1000
    fig5 = pd.read_csv(tmp_path / "reports/figures/fedzda/fig5.csv")
    assert sorted(zip(fig5.start_round, fig5.seed)) == [(2, 0), (2, 1), (3, 0), (3, 1)]
    fig3 = pd.read_csv(tmp_path / "reports/figures/fedzda/fig3.csv")
    assert list(fig3["class"]) == list(range(10)) and fig3.oracle_acc.between(0, 100).all()
    assert fig3.oracle_test_acc.between(0, 100).all() and (fig3.seeds == 1).all()  # the oracle stage's own accuracy
    for fig in ("fig3", "fig4", "fig5"):
        assert (tmp_path / f"reports/figures/fedzda/{fig}.png").stat().st_size > 5000
    # start-round runs continue from the shared FedAvg prefixes (round 1, then round 2 chained on it)
    log = (tmp_path / "logs/train/smoke/synthetic/multimodal/fedzdac-start3/seed0.log").read_text()
    stages = "results/stages/smoke/synthetic/multimodal/seed0"
    assert f"warm-started from {stages}/fedavg_prefix-rounds2.pt at round 2" in log
    assert (
        f"warm-started from {stages}/fedavg_prefix-rounds1.pt at round 1"
        in (tmp_path / "logs/stage/smoke/synthetic/multimodal/seed0/fedavg_prefix-rounds2.log").read_text()
    )

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'results/mlflow.db'}")
    exp = client.get_experiment_by_name("fedzda")
    runs = client.search_runs([exp.experiment_id])
    # tables: 2 partitions x 5 methods x 2 seeds, once each although two tables use them; figures: Fig. 3 oracle,
    # Fig. 4 IID and label-3 FL models, Fig. 5's start at round 3 x 2 seeds (its start at 2 is the tables' Fed-ZDAC)
    assert len(runs) == 20 + 1 + 2 + 2
    run = next(r for r in runs if r.data.tags["method"] == "qffl" and r.data.tags["seed"] == "1")
    assert run.data.tags["paper"] == "fedzda" and run.data.tags["git_commit"] and run.data.tags["threads"] == "1"
    # q as the tuning stage chose it, on seed 0's validation splits, for every seed
    tuning = tmp_path / f"results/stages/smoke/synthetic/{run.data.tags['partition']}/seed0/tuning-methodqffl.pt"
    chosen = torch.load(tuning, weights_only=False)["chosen"]["q"]
    assert run.data.params["method.params.q"] == str(chosen) and run.data.params["preset.rounds"] == "3"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "global_acc")] == [1, 2, 3]
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"metrics.json", "history.csv"}
    zdac = next(r for r in runs if r.data.tags["method"] == "fedzdac")
    # generation cost, every augmenting round (the smoke Fed-ZDAC starts at round 2 of 3)
    assert [m.step for m in client.get_metric_history(zdac.info.run_id, "zsdg_seconds")] == [2, 3]

    # the baselines' table ran through Snakemake and MLflow, under its own experiment (the other baselines:
    # tests/test_baselines.py)
    base = client.search_runs([client.get_experiment_by_name("baselines").experiment_id])
    methods = ["fedavg", "feddata", "fedprox_best-mu0.001", "fedprox_best-mu1.0"]
    assert sorted(r.data.tags["method"] for r in base) == methods
    assert all(r.info.status == "FINISHED" and r.data.tags["fed.identity"] for r in base)
    baselines = pd.read_csv(tmp_path / "reports/tables/baselines/smoke.csv")
    swept = baselines[baselines.method == "fedprox_best"].iloc[0]
    assert swept["variant"].startswith(("fedprox_best-mu0.001 ", "fedprox_best-mu1.0 "))
    assert swept["variant"].endswith("(best local_acc_mean of 2)")
    shared = {r.data.tags["method"]: r.data.tags.get("shared.raw_samples") for r in base}
    assert shared["feddata"] and int(float(shared["feddata"])) > 0 and shared["fedavg"] is None

    claims = pd.read_csv(tmp_path / "reports/tables/fedzda/claims.csv").set_index("claim")
    assert set(claims.index) == {
        "zda_best_local_accuracy",
        "zda_lowest_client_variance",
        "zda_oracle_labels_known_classes",
        "zda_earlier_start_lower_variance",
    }
    assert claims.loc["zda_oracle_labels_known_classes", "evidence"].startswith("synthetic: Spearman")
    summary = (tmp_path / "reports/summary.md").read_text()  # what the report opens on
    assert "fedzda/table1" in summary and "no paper value" in summary
    assert "zda_oracle_labels_known_classes" in summary
    assert set(claims.verdict) <= {"supported", "contradicted", "inconclusive", "not evaluated (no comparable runs)"}
    assert claims.loc["zda_best_local_accuracy", "evidence"].startswith("synthetic/")  # tested on the smoke cells
    assert claims.setting.str.startswith("not comparable (smoke config").all()

    costs = pd.read_csv(tmp_path / "reports/tables/fedzda/costs_smoke.csv")
    assert (costs[costs.method == "fedavg"].relative_to_fedavg == 1).all()
    assert (costs[costs.method == "fedzdac"].zsdg_seconds_per_round > 0).all()

    # nothing to do on a second invocation; one cell can be re-run alone (docs/usage.md: one cell alone)
    assert "Nothing to be done" in snakemake(tmp_path, "-n", "--configfile", str(REPO / "config/smoke.yaml")).stdout
    cell = "results/runs/smoke/synthetic/unimodal/fedavg/seed0/metrics.json"
    counts = job_counts(
        snakemake(
            tmp_path, "-n", "--configfile", str(REPO / "config/smoke.yaml"), "--forcerun", cell, "--", cell
        ).stdout
    )
    assert counts == {"train": 1, "total": 1}

    # the smoke config logs in tracking_mode: batch; switching to live reruns no cell (the mode is no job's input),
    # and logging again keeps each cell's run (its metrics.json digest is up to date) and logs nothing new
    smoke = ("--configfile", str(REPO / "config/smoke.yaml"))
    assert "Nothing to be done" in snakemake(tmp_path, "-n", *smoke, "--config", "tracking_mode=live").stdout
    logged = sorted((tmp_path / "results/mlflow").glob("*.logged.tsv"))
    assert {p.stem.removesuffix(".logged") for p in logged} == {"baselines", "dafl", "feddpms", "fedzda", "flea"}
    counts = job_counts(snakemake(tmp_path, "-n", *smoke, "--forcerun", "mlflow_log").stdout)
    assert set(counts) == {"mlflow_log", "all", "total"} and counts["mlflow_log"] == len(logged)
    snakemake(tmp_path, "--cores", "1", *smoke, "--forcerun", "mlflow_log")
    relogged = client.search_runs([exp.experiment_id])
    assert {r.info.run_id for r in relogged} == {r.info.run_id for r in runs}
    assert all(r.data.tags.get("fed.metrics_sha256") for r in relogged)


LOGGER = textwrap.dedent("""
    import sys
    from fed.tracking import log_run
    history = [{"round": r, "global_acc": 10.0 + r, "train_loss": 1.0 / r} for r in range(1, 101)]
    summary = {"history": history, "last": history[-1], "best": history[-1], "wall_seconds": 1.0,
               "diverged": False, "device": "cpu"}
    log_run(sys.argv[1], "fedzda", f"cell{sys.argv[2]}", {"seed": sys.argv[2]}, {"seed": sys.argv[2]}, summary, [])
""")


def test_eight_concurrent_jobs_against_a_fresh_store_lose_nothing(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    init_store(uri, ["fedzda"])  # what the mlflow_init rule does before training fans out
    procs = [
        subprocess.Popen([sys.executable, "-c", LOGGER, uri, str(i)], stderr=subprocess.PIPE, text=True)
        for i in range(8)
    ]
    errors = [p.communicate()[1] for p in procs if p.wait() != 0]
    assert not errors, errors[0][-2000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("fedzda").experiment_id])
    assert sorted(r.data.tags["seed"] for r in runs) == [str(i) for i in range(8)]
    assert all(len(client.get_metric_history(r.info.run_id, "global_acc")) == 100 for r in runs)


@pytest.mark.slow
def test_a_moved_project_or_a_new_paper_reruns_nothing(smoke_run, tmp_path):
    """Issue 8: the SQLite URI was absolute and the paper list a parameter of mlflow_init, so copying the project
    or adding a paper re-executed every cell."""
    import shutil

    workdir, _ = smoke_run
    moved = tmp_path / "moved"
    shutil.copytree(workdir, moved, symlinks=True)
    smoke = str(REPO / "config/smoke.yaml")
    assert "Nothing to be done" in snakemake(moved, "-n", "--configfile", smoke).stdout
    extra = tmp_path / "extra.yaml"
    extra.write_text(
        "tables:\n  newpaper_table:\n    {paper: newpaper, table: T1, output: newpaper/t1, preset: smoke,\n"
        "     datasets: [synthetic], partitions: [iid], methods: [fedavg], metrics: [global_acc], seeds: [7],\n"
        "     published: false}\n"
    )
    counts = job_counts(snakemake(moved, "-n", "--configfile", smoke, str(extra)).stdout)
    assert counts["train"] == 1 and counts["mlflow_init"] == 1  # only the new paper's cell and experiment


def reversed_keys(value):
    """``value`` with every mapping's keys in reverse order, at any depth."""
    if isinstance(value, dict):
        return {k: reversed_keys(value[k]) for k in reversed(list(value))}
    return value


@pytest.mark.slow
def test_reordering_a_methods_preset_or_partitions_keys_reruns_nothing(smoke_run, tmp_path):
    """Snakemake compares a job's params by their repr, key order included: the rules that partition, stage and train
    pass config entries with their keys sorted (fed.config.canonical), so an edit that only reorders a method's,
    preset's or partition's keys reruns none of them; a changed value still does."""
    import yaml

    workdir = tmp_path / "work"
    shutil.copytree(smoke_run[0], workdir, symlinks=True)
    overlay = {
        "presets": {"order": {"base": "smoke", "rounds": 2, "local_epochs": 1, "checkpoint_every": 1}},
        "partitions": {"order_dir": {"scheme": "dirichlet", "beta": 0.5}},
        "methods": {"order_fedprox": {"algorithm": "fedprox", "mu": 0.1}},
        "tables": {
            "order_t": {
                "paper": "order",
                "table": "T1",
                "output": "order/t",
                "preset": "order",
                "datasets": ["synthetic"],
                "partitions": ["order_dir"],
                "methods": ["order_fedprox"],
                "metrics": ["global_acc"],
                "seeds": [0],
                "published": False,
            }
        },
    }

    def args(config):
        path = tmp_path / "overlay.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))  # safe_dump sorts keys unless told not to
        return ("--configfile", str(REPO / "config/smoke.yaml"), str(path), "--", "reports/tables/order/t.csv")

    snakemake(workdir, "--cores", "1", *args(overlay))
    assert (workdir / "reports/tables/order/t.md").read_text().startswith("order T1. Ours:")  # the default title
    # the table job may rerun (seconds: an aggregation spec's key order can be its output's order), no other
    plan = snakemake(workdir, "-n", *args(reversed_keys(overlay))).stdout
    assert "Nothing to be done" in plan or set(job_counts(plan)) <= {"table", "total"}, plan
    changed = reversed_keys(overlay)
    changed["methods"]["order_fedprox"]["mu"] = 0.2
    counts = job_counts(snakemake(workdir, "-n", *args(changed)).stdout)
    assert counts["train"] == 1 and "partition" not in counts


@pytest.mark.slow
def test_migrate_params_keeps_a_tree_recorded_before_canonical_params_from_rerunning(smoke_run, tmp_path):
    """A tree built before the rules sorted their params' keys: ``fed migrate-params`` rewrites the record of an output
    whose params changed only in key order, and puts back one whose value changed too (Snakemake judges both);
    without --apply it says so and changes nothing."""
    from fed.config import canonical
    from fed.migrate import record_path

    workdir = tmp_path / "work"
    shutil.copytree(smoke_run[0], workdir, symlinks=True)
    metadata = workdir / ".snakemake/metadata"
    cell = "results/runs/smoke/synthetic/unimodal/{}/seed0/metrics.json"
    reordered, revalued = cell.format("fedavg"), cell.format("fedprox")
    assert snakemake(workdir, "-n", "--configfile", REPO / "config/smoke.yaml").stdout.count("rule train:") == 0
    before = {}
    for key, lr in ((reordered, None), (revalued, 0.123)):  # as an older tree recorded them: keys in another order
        record = json.loads(record_path(metadata, key).read_text())
        before[key] = record["params"]
        old = []
        for text in record["params"]:  # the params the rule sorts (not its MLflow tags, passed as built)
            value = ast.literal_eval(text)
            if repr(canonical(value)) != text:
                old.append(text)
                continue
            if isinstance(value, dict) and lr is not None and "lr" in value:
                value["lr"] = lr
            old.append(repr(reversed_keys(value)))
        assert old != record["params"]
        record_path(metadata, key).write_text(json.dumps(record | {"params": old}))
    tampered = {key: record_path(metadata, key).read_text() for key in before}

    def migrate(*args):
        argv = [sys.executable, "-m", "fed.cli", "migrate-params", str(REPO / "config/smoke.yaml"), "-d", workdir]
        return subprocess.run([*map(str, argv), *args], capture_output=True, text=True, check=True).stdout

    said = migrate()
    order, value = (
        "params changed only in key order, their records",
        "1 jobs (by first output): params changed in value",
    )
    assert f"1 jobs (by first output): {order} would be rewritten (run again with --apply)\n  {reordered}" in said
    assert f"{value} (these rerun)\n  {revalued}" in said
    assert {key: record_path(metadata, key).read_text() for key in before} == tampered
    assert not (workdir / ".snakemake/fed-migrate").exists()
    said = migrate("--apply")
    assert f"{order} rewritten\n  {reordered}\n{value}" in said
    assert sorted(json.loads(record_path(metadata, reordered).read_text())["params"]) == sorted(before[reordered])
    assert record_path(metadata, revalued).read_text() == tampered[revalued]
    (saved,) = (workdir / ".snakemake/fed-migrate").glob(f"*/{record_path(metadata, reordered).name}")
    assert saved.read_text() == tampered[reordered]  # the record as it was, kept
    plan = snakemake(workdir, "-n", "--configfile", REPO / "config/smoke.yaml").stdout
    (train,) = re.findall(r"rule train:\n(?:    .*\n)*", plan)
    assert f"output: {revalued}" in train and "Params have changed" in train


@pytest.mark.slow
def test_tables_rebuild_from_committed_reference_metrics_without_training(smoke_run, tmp_path):
    """`fed export-reference` copies finished cells (no weights); with `reference_dir` a fresh checkout rebuilds
    the tables from them, and trains only what the reference lacks."""
    workdir, _ = smoke_run
    reference = tmp_path / "reference"
    proc = subprocess.run(
        [sys.executable, "-m", "fed.cli", "export-reference", str(workdir / "results"), str(reference)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "finished cells" in proc.stdout and not list(reference.glob("**/*.pt"))
    manifest = json.loads((reference / "MANIFEST.json").read_text())
    assert "smoke/synthetic/multimodal/qffl/seed1" in manifest["cells"]
    # each cell with the commit it recorded when it ran, not the export's
    record = json.loads((reference / "runs/smoke/synthetic/multimodal/qffl/seed1/metrics.json").read_text())
    assert manifest["cells"]["smoke/synthetic/multimodal/qffl/seed1"] == record["tracking"]["tags"]["git_commit"]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    args = ("--configfile", str(REPO / "config/smoke.yaml"), "--config", f"reference_dir={reference}")
    dry = snakemake(fresh, "-n", "reports/tables/fedzda/table1.csv", *args).stdout
    assert "rule train:" not in dry and "rule stage:" not in dry
    snakemake(fresh, "--cores", "1", "reports/tables/fedzda/table1.csv", *args)
    rebuilt = pd.read_csv(fresh / "reports/tables/fedzda/table1.csv")
    original = pd.read_csv(workdir / "reports/tables/fedzda/table1.csv")
    pd.testing.assert_frame_equal(rebuilt, original)
    # a cell missing from the reference is trained
    shutil.rmtree(reference / "runs/smoke/synthetic/unimodal/fedavg/seed0")
    counts = job_counts(snakemake(fresh, "-n", "reports/tables/fedzda/table1.csv", *args).stdout)
    assert counts["train"] == 1
    # a committed cell run with other settings than the config now gives it is stale: recomputed, and said so
    shares = {"partitions": {"multimodal": {"shares": [0.4, 0.3, 0.15, 0.1, 0.05]}}}
    changed = write_yaml(tmp_path / "changed.yaml", shares)
    over = ("--configfile", str(REPO / "config/smoke.yaml"), str(changed), "--config", f"reference_dir={reference}")
    proc = snakemake(fresh, "-n", "reports/tables/fedzda/table1.csv", *over)
    stale = [line for line in proc.stderr.splitlines() if "was run with other partition" in line]
    # the table's 5 methods x 2 seeds, and Fig. 5's Fed-ZDAC from round 3 (2 seeds): in tracking_mode: batch the
    # logging jobs list every cell the config trains, so every stale one is said, each once
    cells = {re.search(r"runs/smoke/synthetic/multimodal/(\S+)/seed(\d)", line).groups() for line in stale}
    methods = ("fedavg", "fedprox", "qffl", "fedzdac", "fedzdas", "fedzdac-start3")
    assert len(stale) == len(cells) and cells == {(m, str(s)) for m in methods for s in (0, 1)}
    assert job_counts(proc.stdout)["train"] == 1 + 5 * 2


def test_an_audited_table_audits_each_cell_after_its_run_and_trains_nothing_new(smoke_run, tmp_path):
    """``audit: true`` plans one audit job per cell of the table (rule audit) and no training; an audit reads its
    cell's model, metrics and train-job benchmark (peak memory) and writes the leakage and bytes record."""
    workdir, _ = smoke_run
    overlay = write_yaml(tmp_path / "audit.yaml", {"tables": {"leaderboard": {"audit": True}}})
    smoke = str(REPO / "config/smoke.yaml")
    costs = "reports/tables/fedzda/costs_smoke.csv"
    plan = snakemake(workdir, costs, "-n", "--forcerun", "costs", "--quiet", "rules", "--configfile", smoke, overlay)
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", plan.stdout, re.M))
    assert jobs.get("audit") == "20" and "train" not in jobs and "stage" not in jobs, plan.stdout  # 5 × 2 × 2
    cell = "results/runs/smoke/synthetic/multimodal/fedzdas/seed0"
    snakemake(workdir, f"{cell}/audit.json", "--cores", "1", "--configfile", smoke, overlay)
    record = json.loads((workdir / cell / "audit.json").read_text())
    assert record["jobs"]["train"]["max_rss_mb"] > 0 and record["model_bytes"] > 0
    inversion = record["artifacts"]["model_inversion"]
    assert inversion["audited"] == 10 * record["inversion"]["per_class"] and 0 < inversion["chance"] < 1
    assert any(k.startswith("stage warm: fedavg_prefix") for k in record["jobs"])  # Fed-ZDAS continues a prefix
