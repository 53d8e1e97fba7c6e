"""The head-to-head config (issue 27): the full grid's size, the methods' hyper-parameters equal to their papers',
and the CPU overlay cuts only what its caption says."""

import pytest
from conftest import REPO

from fed.config import load_yaml
from fed.grid import Grid

PAPERS = {  # h2h method -> (paper file, method there)
    "h2h_fedzdac": ("fedzda", "fedzdac"),
    "h2h_fedzdas": ("fedzda", "fedzdas"),
    "h2h_feddpms": ("feddpms", "feddpms"),
    "h2h_dafl": ("dafl", "dafl_gamma0.01"),
    "h2h_flea": ("flea", "flea"),
    "h2h_fedprox": ("flea", "fedprox_flea"),
}


@pytest.fixture(scope="module")
def full():
    return Grid.from_files([REPO / "config/headtohead.yaml"], REPO)


@pytest.fixture(scope="module")
def cpu():
    return Grid.from_files([REPO / "config/headtohead.yaml", REPO / "config/headtohead_cpu.yaml"], REPO)


def _board(grid, name="headtohead_leaderboard"):
    """The leaderboard (long form) of ``grid``'s head-to-head cells, as the table rule builds it."""
    from fed.reporting import leaderboard as lb
    from fed.reporting.tables import collect_runs

    table = grid.config["tables"][name]
    runs = collect_runs([dict(c, path=grid.cell_path(**c)) for c in grid.table_cells(table)])
    return lb.leaderboard(runs, table["datasets"], table["partitions"], table["methods"], table["metrics"],
                          grid.preset(table["preset"])["report"], table["baseline"])  # fmt: skip


def test_the_full_grid_is_12_methods_by_6_regimes_by_3_seeds_on_one_model_and_protocol(full):
    table = full.config["tables"]["headtohead_leaderboard"]
    assert len(table["methods"]) == 12 and len(table["partitions"]) == 6 and table["seeds"] == [0, 1, 2]
    assert table["layout"] == "leaderboard" and table["baseline"] == "fedavg"
    assert len(full.cell_paper) == 216 and set(full.cell_paper.values()) == {"headtohead"}
    assert {k[0] for k in full.cell_paper} == {"headtohead"} and full.preset("headtohead")["model"] == "cnn_dpms_fmnist"
    kinds = sorted(s.kind for stages in full.stages.values() for s in stages.values())
    # per regime and seed: DA-FL's GANs, FedDPMS' Stage I, Fed-ZDA's FedAvg prefix; per regime: two tunings (seed 0)
    assert {k: kinds.count(k) for k in set(kinds)} == {
        "dp_cgan": 18,
        "vae_prelim": 18,
        "fedavg_prefix": 18,
        "tuning": 12,
    }


def test_feddpms_trains_with_its_authors_optimiser_in_stage_i_and_its_cells(full):
    stage = full.method_stages("h2h_feddpms")["warm"]
    assert stage in full.stages[("headtohead", "fmnist", "h2h_dir0.5", 1)].values()  # the stage job the DAG runs
    assert stage.protocol == {"optimizer": "adam", "lr": 0.001, "batch_size": 64}
    assert stage.key == "vae_prelim-fl_batch_size64-fl_lr0.001-fl_optimizeradam-rounds20-vae_weight0.05"
    assert not full.method_stages("h2h_fedprox")["tuning"].protocol  # the others: the preset's SGD
    protocols = {m: s.get("protocol") for m, s in full.config["methods"].items() if m.startswith("h2h_")}
    assert {m for m, p in protocols.items() if p} == {"h2h_feddpms", "h2h_flea"}  # no other method departs


def test_a_method_may_move_the_cut_but_not_change_the_network(full):
    from fed.validate import split_errors

    table = full.config["tables"]["headtohead_leaderboard"]
    assert split_errors(full.config, table) == []  # FLea's block-2 split of the same CNN
    other = {**full.config, "methods": {**full.config["methods"], "h2h_flea": {"protocol": {"model": "cnn_mnist"}}}}
    (error,) = split_errors(other, table)
    assert "protocol model 'cnn_mnist' is not 'cnn_dpms_fmnist' split elsewhere" in error


@pytest.mark.parametrize("h2h,paper", PAPERS.items())
def test_each_method_has_its_papers_hyper_parameters(full, h2h, paper):
    """The h2h_ entries copy their paper's method; only the start round (Fed-ZDA's 80 % of the rounds) and
    FedProx's grid (FLea tunes μ over 3 values, we over 4) may differ."""
    file, name = paper
    theirs = load_yaml(REPO / f"config/papers/{file}.yaml")["methods"][name]
    ours = full.config["methods"][h2h]
    if h2h == "h2h_fedprox":
        assert ours["algorithm"] == theirs["algorithm"] and set(theirs["tune"]["grid"]["mu"]) < set(
            ours["tune"]["grid"]["mu"]
        )
        return
    if h2h == "h2h_feddpms":  # its authors' local optimiser, which is its paper preset's (config/papers)
        preset = load_yaml(REPO / f"config/papers/{file}.yaml")["presets"][file]
        assert ours["protocol"] == {k: preset[k] for k in ("optimizer", "lr", "batch_size")}
    if h2h == "h2h_flea":  # its kind of cut: the same network split after block 2
        assert ours["protocol"] == {"model": "cnn_dpms_fmnist_block2"}
    ours = {k: v for k, v in ours.items() if k != "protocol"}
    assert ours == theirs


def test_the_cpu_overlay_cuts_rounds_epochs_and_budgets_not_the_grid(full, cpu):
    table, cut = full.config["tables"]["headtohead_leaderboard"], cpu.config["tables"]["headtohead_leaderboard"]
    assert {k: v for k, v in cut.items() if k != "preset"} == {k: v for k, v in table.items() if k != "preset"}
    assert cut["preset"] == "headtohead_cpu" and len(cpu.cell_paper) == 216
    figure = cpu.config["figures"]["headtohead_gain"]
    assert figure["preset"] == "headtohead_cpu" and figure["methods"] == cut["methods"]
    assert figure["partitions"] == cut["partitions"] and figure["seeds"] == cut["seeds"]
    preset = cpu.preset("headtohead_cpu")
    changed = {k for k, v in preset.items() if full.preset("headtohead").get(k) != v}
    assert changed == {"rounds", "local_epochs", "reduction"}
    # a quarter of each client's samples, the label skews untouched; the scarce regime keeps its ≈ 50
    for name in cut["partitions"]:
        small, big = cpu.config["partitions"][name], full.config["partitions"][name]
        if name == "h2h_scarce":
            assert small == big
        else:
            assert small == {**big, "subsample": 0.25}, name
    # augmentation starts at the same share of the rounds
    assert cpu.config["methods"]["h2h_fedzdac"]["start_round"] / preset["rounds"] == 0.8
    assert full.config["methods"]["h2h_fedzdac"]["start_round"] / full.preset("headtohead")["rounds"] == 0.8
    dpms = cpu.config["methods"]["h2h_feddpms"]["preliminary_rounds"]
    assert dpms / preset["rounds"] == full.config["methods"]["h2h_feddpms"]["preliminary_rounds"] / 100


def test_the_answer_table_reads_wins_privacy_and_cost_from_the_tables():
    import pandas as pd

    from fed.reporting.answer import answer_table

    def lb(regime, method, rank, diff, significant, note="", seeds=3):
        return {
            "regime": regime,
            "method": method,
            "metric": "global_acc",
            "higher_is_better": True,
            "rank": rank,
            "diff": diff,
            "significant": significant,
            "note": note,
            "seeds": seeds,
            "diverged_seeds": 3 - seeds,
        }

    leaderboard = pd.DataFrame(
        [
            lb("a", "fedavg", 2, None, False, "baseline"),
            lb("a", "x", 1, 5.0, True),
            lb("b", "fedavg", 1, None, False, "baseline"),
            lb("b", "x", 2, -3.0, True),
            lb("c", "x", 1, 1.0, False),
            lb("all regimes", "x", 1.3, 1.0, False),
            lb("all regimes", "fedavg", 1.7, None, False, "baseline"),
            lb("a", "d", None, None, False, seeds=0),  # every seed diverged (FedDPMS under the shared SGD)
            lb("all regimes", "d", None, None, False, seeds=0),
        ]
    )
    privacy = pd.DataFrame(
        {
            "method": ["x", "x", "fedavg"],
            "synthetic_samples": [10, 20, None],
            "epsilon_total": [51.00049, 51.00049, None],  # the ledger's CSV is unrounded: the answer prints 3 decimals
            "mb_shared": [1.0, 3.0, 0.0],
            "leakage": [0.1, 0.3, None],
            "inversion_leakage": [0.0, 0.2, 0.05],
        }
    )
    costs = pd.DataFrame(
        {
            "method": ["x", "x", "fedavg"],
            "relative_to_fedavg": [2.0, 4.0, 1.0],
            "mb_per_client_round": [1.0, 1.0, 1.0],
            "stage_seconds": [10.0, 30.0, 0.0],
            "peak_rss_mb": [700.0, 900.0, 500.0],
            "local_steps": [1000.0, 3000.0, 500.0],
        }
    )
    out = answer_table(leaderboard, costs, privacy, "global_acc").set_index("method")
    assert list(out.index) == ["x", "fedavg", "d"]  # by mean rank over all regimes
    assert out.loc["d", "global_acc vs baseline (all regimes)"] == "diverged (3 of 3)"  # not "+nan"
    x = out.loc["x"]
    assert x["global_acc vs baseline (all regimes)"] == "+1.00"  # not significant: no *
    assert x["significantly better in"] == "a" and x["significantly worse in"] == "b"  # c: not significant
    assert x["shares"] == "synthetic_samples" and out.loc["fedavg", "shares"] == "model updates only"
    assert x["MB shared"] == 2.0 and x["leakage"] == pytest.approx(0.2) and x["ε"] == 51.0
    assert x["time vs FedAvg"] == 3.0 and x["stage s"] == 20.0 and x["peak MB"] == 900.0 and x["local steps"] == 2000
    assert out.loc["fedavg", "global_acc vs baseline (all regimes)"] == "baseline"


def test_every_regime_of_the_cpu_overlay_is_committed_with_its_audits(cpu):
    """reference/headtohead_cpu holds every cell of the CPU overlay's leaderboard and heat map, all six regimes: its
    tables rebuild from a fresh clone with no training and no audit (metrics.json and audit.json both read from the
    committed copy)."""
    table = cpu.config["tables"]["headtohead_leaderboard"]
    regimes = ["h2h_1class", "h2h_2class", "h2h_dir0.1", "h2h_dir0.5", "h2h_multimodal", "h2h_scarce"]
    assert table["partitions"] == cpu.config["figures"]["headtohead_gain"]["partitions"] == regimes
    cells = cpu.cost_cells(table["paper"], table["preset"], audited=True)
    assert len(cells) == 6 * 36
    for c in cells:
        for file in ("metrics.json", "audit.json"):
            assert cpu.cell_path(**c, file=file).startswith(str(REPO / "reference/headtohead_cpu/")), (c, file)


def test_the_committed_flea_cut_check_is_current():
    """config/headtohead_flea_cut.yaml's 6 cells (FedAvg and FLea on the CNN split after block 2) are committed."""
    files = [REPO / f"config/{f}.yaml" for f in ("headtohead", "headtohead_cpu", "headtohead_flea_cut")]
    check = Grid.from_files(files, REPO)
    table = check.config["tables"]["headtohead_flea_cut"]
    cells = [
        {"preset": table["preset"], "dataset": "fmnist", "partition": "h2h_dir0.5", "method": m, "seed": s}
        for m in table["methods"]
        for s in table["seeds"]
    ]
    for c in cells:
        assert check.cell_path(**c).startswith(str(REPO / "reference/headtohead_cpu/runs/headtohead_cpu_block2/")), c


def test_the_results_page_shows_the_glance_table_the_committed_cells_give(cpu):
    """docs/results/headtohead.md's leaderboard is the leaderboard's first table
    (``fed.reporting.leaderboard.matrix``) built from the committed cells: a regime landed without refreshing the
    docs, or a hand-edited number, fails."""
    from fed.reporting import leaderboard as lb

    assert lb.matrix(_board(cpu)).to_markdown(index=False) in (REPO / "docs/results/headtohead.md").read_text()


def analyses_glances(grid, table: str) -> dict[str, str]:
    """A leaderboard's analyses glance tables (``rule analyses``' markdown, by title) from its cells."""
    from fed.reporting import analyses

    _, glances = analyses.board_analyses(*analyses.table_runs(grid, table))
    return {title: frame.to_markdown(index=False, disable_numparse=True) for title, frame in glances}


def test_the_results_page_shows_the_analyses_the_committed_cells_give(cpu):
    """docs/results/headtohead.md's analyses of the board before the protocol are ``rule analyses``' glance table of
    the committed cells: a hand-edited p or verdict fails."""
    glance = analyses_glances(cpu, "headtohead_leaderboard")["global_acc"]
    assert glance in (REPO / "docs/results/headtohead.md").read_text()


def test_the_fedlc_absent_check_changes_only_the_rule_and_is_committed(cpu):
    """config/headtohead_fedlc_absent.yaml: FedLC with FLea's absent-class rule beside the head-to-head's (FL-bench's),
    the same tuning, regimes and seeds; its 18 cells are committed (the table rebuilds without training)."""
    files = [REPO / f"config/{f}.yaml" for f in ("headtohead", "headtohead_cpu", "headtohead_fedlc_absent")]
    check = Grid.from_files(files, REPO)
    methods = check.config["methods"]
    assert {**methods["h2h_fedlc"], "absent": "offset"} == methods["h2h_fedlc_offset"]
    table, board = check.config["tables"]["headtohead_fedlc_absent"], cpu.config["tables"]["headtohead_leaderboard"]
    assert table["baseline"] == "h2h_fedlc" and table["preset"] == board["preset"]
    assert table["partitions"] == board["partitions"] and table["seeds"] == board["seeds"]
    cells = check.table_cells(table)
    assert len(cells) == 6 * 3 * 3
    for c in cells:
        assert check.cell_path(**c).startswith(str(REPO / "reference/headtohead_cpu/runs/headtohead_cpu/")), c


def test_the_cuts_check_cuts_only_each_method_s_own_work_and_is_committed(cpu):
    """config/headtohead_cuts.yaml: the four costliest methods with their own work cut to a fraction (Fed-ZDA's start
    round, FedData's share, FedDPMS' quota and attempts), everything else as the CPU overlay's; the 1- and 2-class
    regimes, 3 seeds; its 24 cells are committed beside the overlay's (the table rebuilds without training)."""
    files = [REPO / f"config/{f}.yaml" for f in ("headtohead", "headtohead_cpu", "headtohead_cuts")]
    check = Grid.from_files(files, REPO)
    methods = check.config["methods"]
    for full, cut, change in (
        ("h2h_fedzdac", "h2h_fedzdac_last", {"start_round": 20}),
        ("h2h_fedzdas", "h2h_fedzdas_last", {"start_round": 20}),
        ("feddata", "feddata_1pct", {"share_fraction": 0.01}),
        ("h2h_feddpms", "h2h_feddpms_tenth", {"quota": 20, "max_attempts": 200}),
    ):
        assert all(methods[full][k] != v for k, v in change.items()), full  # a cut, not the overlay's value
        assert {**methods[full], **change} == methods[cut], cut
    table, board = check.config["tables"]["headtohead_cuts"], cpu.config["tables"]["headtohead_leaderboard"]
    assert table["baseline"] == "fedavg" and table["preset"] == board["preset"] and table["seeds"] == board["seeds"]
    assert table["partitions"] == ["h2h_1class", "h2h_2class"] and not table.get("audit")
    cells = check.table_cells(table)
    assert len(cells) == 9 * 2 * 3
    for c in cells:
        path = check.cell_path(**c)
        assert path.startswith(str(REPO / "reference/headtohead_cpu/runs/headtohead_cpu/")), c


def test_the_3h_overlay_drops_regimes_and_nothing_else(cpu):
    """config/headtohead_cpu_3h.yaml: the CPU overlay on two of its six regimes (2 classes a client and Dir(0.1)), every
    method's settings, the seeds and the preset unchanged; so its cells, stages and audits are the CPU overlay's,
    the committed ones serve it and a run from nothing trains those two regimes only."""
    files = [REPO / f"config/{f}.yaml" for f in ("headtohead", "headtohead_cpu", "headtohead_cpu_3h")]
    short = Grid.from_files(files, REPO)
    regimes = ["h2h_2class", "h2h_dir0.1"]
    board = {**cpu.config["tables"]["headtohead_leaderboard"], "partitions": regimes}
    gain = {**cpu.config["figures"]["headtohead_gain"], "partitions": regimes}
    expected = {
        **cpu.config,
        "tables": {**cpu.config["tables"], "headtohead_leaderboard": board},
        "figures": {**cpu.config["figures"], "headtohead_gain": gain},
    }
    assert short.config == expected  # only the leaderboard's and the heat map's regimes differ
    assert {key[2] for key in short.stages} == set(regimes)  # the FedAvg prefixes, GANs, Stage I, tunings
    cells = short.cost_cells(board["paper"], board["preset"], audited=True)
    assert len(cells) == 2 * 36 and {c["partition"] for c in cells} == set(regimes)
    for c in cells:
        for file in ("metrics.json", "audit.json"):
            assert short.cell_path(**c, file=file) == cpu.cell_path(**c, file=file), (c, file)
            assert short.cell_path(**c, file=file).startswith(str(REPO / "reference/headtohead_cpu/")), (c, file)


def cpu_comparison(epyc, xeon) -> str:
    """docs/results/headtohead.md's table of the 3 h overlay on two CPUs: per method (the baseline left out) and
    regime (all regimes last) the difference to FedAvg, committed / Xeon, * significant after Holm."""
    import pandas as pd

    from fed.reporting import leaderboard as lb

    a, b = (board[board.metric == "global_acc"].set_index(["regime", "method"]) for board in (epyc, xeon))
    regimes = list(dict.fromkeys(epyc.regime))
    methods = a.loc[lb.ALL]["diff"].drop("fedavg").sort_values(ascending=False, kind="stable").index
    rows = [{"method": m, **{r: f"{lb._diff(a.loc[(r, m)])} / {lb._diff(b.loc[(r, m)])}" for r in regimes}}
            for m in methods]  # fmt: skip
    return pd.DataFrame(rows).to_markdown(index=False)


def test_the_3h_overlay_on_another_cpu_moves_cells_not_its_pooled_verdicts():
    """reference/headtohead_cpu_xeon: the 3 h overlay's 72 cells and audits run again from nothing on a 2-core Intel
    Xeon (the committed ones: earlier sessions' machine), same code, settings, seeds and partitions. The two CPUs round
    differently, so the cells are not bitwise equal; the pooled leaderboard keeps its significant methods and their
    signs (and every method more than 1 pp from FedAvg keeps its sign), each pooled difference within 0.7 pp.
    docs/results/headtohead.md ("The same cells on another CPU") shows the comparison as these cells give it."""
    names = ("headtohead", "headtohead_cpu", "headtohead_cpu_3h")
    epyc = Grid.from_files([REPO / f"config/{f}.yaml" for f in names], REPO)
    xeon = Grid.from_files([REPO / f"config/{f}.yaml" for f in (*names, "headtohead_cpu_3h_xeon")], REPO)
    table = xeon.config["tables"]["headtohead_leaderboard"]
    assert xeon.config["methods"] == epyc.config["methods"] and table == epyc.config["tables"]["headtohead_leaderboard"]
    cells = xeon.cost_cells(table["paper"], table["preset"], audited=True)
    assert len(cells) == 72
    for c in cells:
        for file in ("metrics.json", "audit.json"):
            assert xeon.cell_path(**c, file=file).startswith(str(REPO / "reference/headtohead_cpu_xeon/")), (c, file)
    a, b = _board(epyc), _board(xeon)
    cell_a, cell_b = (board[board.metric == "global_acc"].set_index(["regime", "method"]) for board in (a, b))
    assert (cell_a["mean"] != cell_b["mean"]).any()  # not the same numbers: another CPU's rounding
    pooled_a, pooled_b = cell_a.loc["all regimes"], cell_b.loc["all regimes"]
    assert pooled_a.index[pooled_a.significant].tolist() == pooled_b.index[pooled_b.significant].tolist() == ["feddata"]
    clear = (pooled_a["diff"].abs() > 1) | (pooled_b["diff"].abs() > 1)
    assert clear.sum() == 7 and (pooled_a["diff"][clear] > 0).equals(pooled_b["diff"][clear] > 0)
    assert (pooled_a["diff"] - pooled_b["diff"]).abs().max() < 0.7
    assert cpu_comparison(a, b) in (REPO / "docs/results/headtohead.md").read_text()


PROTOCOL_BOARDS = ["headtohead_protocol_shared", "headtohead_protocol_authors"]


@pytest.fixture(scope="module")
def protocol():
    names = ("headtohead", "headtohead_cpu", "headtohead_protocol", "headtohead_protocol_authors")
    return Grid.from_files([REPO / f"config/{n}.yaml" for n in names], REPO)


def protocol_leakage(grid, partition="h2h_dir0.5"):
    """The leakage glance of both protocol boards' methods at one regime, from their committed audits."""
    from fed.reporting.audit import audit_privacy, leakage_glance

    cells = grid.cost_cells("headtohead", "h2h_protocol", audited=True)
    privacy = audit_privacy([dict(c, path=grid.cell_path(**c, file="audit.json"), metrics=grid.cell_path(**c))
                             for c in cells], decimals=None)  # fmt: skip
    boards = [grid.config["tables"][b]["methods"] for b in PROTOCOL_BOARDS]
    methods = boards[0] + [m for m in boards[1] if m not in boards[0]]
    return leakage_glance(privacy, partition, methods)


def test_both_protocol_boards_are_committed_with_their_audits(protocol):
    """reference/headtohead_protocol holds all 510 cells of the two boards (13 methods each, nine shared: 17 a
    (regime, seed), 6 regimes, 5 seeds), each with its audit: both boards rebuild from a fresh clone."""
    cells = protocol.cost_cells("headtohead", "h2h_protocol", audited=True)
    assert len(cells) == 17 * 6 * 5
    for c in cells:
        for file in ("metrics.json", "audit.json"):
            assert protocol.cell_path(**c, file=file).startswith(str(REPO / "reference/headtohead_protocol/")), c


def test_the_results_page_shows_both_protocol_boards_the_committed_cells_give(protocol):
    """docs/results/headtohead.md shows, for each board, its leaderboard's first table, its analyses (global accuracy,
    and FedData against the step-matched FedAvg) and the leakage at Dir(0.5), each as the workflow's functions build
    them from the committed cells: a hand-edited number, or a board recommitted without the page, fails."""
    from fed.reporting import leaderboard as lb

    page = (REPO / "docs/results/headtohead.md").read_text()
    for board in PROTOCOL_BOARDS:
        assert lb.matrix(_board(protocol, board)).to_markdown(index=False) in page, board
        glances = analyses_glances(protocol, board)
        assert glances["global_acc"] in page, board
        assert glances["global_acc: p_feddata against p_fedavg_matched"] in page, board
    assert protocol_leakage(protocol).to_markdown(index=False, disable_numparse=True) in page
