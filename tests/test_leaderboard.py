"""Leaderboards (fed.reporting.leaderboard) and the gain heat map on hand-computed numbers: 2 regimes × 3 methods ×
3 seeds of chosen metrics.json files, one seed diverged; the checks of a leaderboard's config keys."""

import copy
import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO
from scipy import stats
from snakemake.utils import validate

from fed.config import with_papers
from fed.reporting import leaderboard as lb
from fed.reporting.figure_kinds import FIGURE_KINDS
from fed.reporting.tables import collect_runs
from fed.validate import check_config

# (partition, method) -> per seed (global_acc, client_acc_variance) at the best round; None: the run diverged
BEST = {
    ("p1", "fedavg"): [(70, 30), (72, 32), (74, 34)],
    ("p1", "a"): [(75, 20), (78, 22), (78, 27)],
    ("p1", "b"): [(71, 40), (71, 41), (74, 42)],
    ("p2", "fedavg"): [(60, 30), (61, 32), (62, 34)],
    ("p2", "a"): [(62, 20), (64, 22), None],
    ("p2", "b"): [(58, 40), (59, 41), (63, 42)],
}
METHODS = ["fedavg", "a", "b"]


def write_cells(tmp_path) -> list[dict]:
    """One metrics.json per cell, as the engine writes it: the preset reports the best round; the last round is 10
    points lower (the protocol must be read); the diverged run has a finite best round from before it diverged."""
    cells = []
    for (partition, method), seeds in BEST.items():
        for seed, values in enumerate(seeds):
            if values is None:
                best, last = {"round": 1, "global_acc": 99.0, "client_acc_variance": 1.0}, {}
                last = {"round": 2, "global_acc": None, "client_acc_variance": None}
            else:
                best = {"round": 2, "global_acc": values[0], "client_acc_variance": values[1]}
                last = {"round": 3, "global_acc": values[0] - 10, "client_acc_variance": values[1]}
            record = {"config": {"report": "best"}, "best": best, "last": last, "diverged": values is None}
            path = tmp_path / f"{partition}-{method}-{seed}.json"
            path.write_text(json.dumps(record))
            cells.append(dict(dataset="d", partition=partition, method=method, seed=seed, path=str(path)))
    return cells


@pytest.fixture
def board(tmp_path):
    runs = collect_runs(write_cells(tmp_path))
    return lb.leaderboard(runs, ["d"], ["p1", "p2"], METHODS, ["global_acc", "client_acc_variance"], "best")


def row(board, regime, method, metric="global_acc"):
    sel = board[(board.regime == regime) & (board.method == method) & (board.metric == metric)]
    assert len(sel) == 1
    return sel.iloc[0]


def test_holm_by_hand():
    # sorted: 0.005 × 4 = 0.02, 0.01 × 3 = 0.03, 0.03 × 2 = 0.06, 0.04 × 1 = 0.04 -> 0.06 (never below an earlier one)
    adjusted = lb.holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert list(adjusted < lb.ALPHA) == [True, False, False, True]
    # NaN is not a comparison (m = 2: 0.2 × 2, 0.6 × 1); adjusted p-values are capped at 1
    assert lb.holm([0.2, math.nan, 0.6]) == pytest.approx([0.4, math.nan, 0.6], nan_ok=True)
    assert lb.holm([0.6, 0.9]) == pytest.approx([1.0, 1.0])


def test_paired_t_is_scipys_and_zero_spread_is_decisive():
    assert lb.paired_t([3, 5, 4], [1, 1, 1]) == pytest.approx(tuple(stats.ttest_rel([3, 5, 4], [1, 1, 1])))
    assert lb.paired_t([2, 3], [1, 2]) == (math.inf, 0.0) and lb.paired_t([1, 2], [1, 2]) == (0.0, 1.0)
    assert all(math.isnan(v) for v in lb.paired_t([1], [0]))


def test_means_stds_ranks_and_the_diverged_seed(board):
    assert (row(board, "p1", "fedavg")["mean"], row(board, "p1", "fedavg")["std"]) == pytest.approx((72, 2))
    assert (row(board, "p1", "a")["mean"], row(board, "p1", "a")["std"]) == pytest.approx((77, math.sqrt(3)))
    assert (row(board, "p2", "b")["mean"], row(board, "p2", "b")["std"]) == pytest.approx((60, math.sqrt(7)))
    # a's seed 2 in p2 diverged: its best round (99) is never averaged in, and the row says so
    a2 = row(board, "p2", "a")
    assert (a2["mean"], a2["std"], a2.seeds, a2.diverged_seeds) == pytest.approx((63, math.sqrt(2), 2, 1))
    assert "diverged: seed 2 (not averaged in, not paired)" in a2.note
    # ranks per regime (ties share the better rank), higher accuracy first, lower variance first
    assert {m: row(board, "p1", m)["rank"] for m in METHODS} == {"fedavg": 2, "a": 1, "b": 2}
    assert {m: row(board, "p2", m)["rank"] for m in METHODS} == {"fedavg": 2, "a": 1, "b": 3}
    variance = {m: row(board, "p1", m, "client_acc_variance")["rank"] for m in METHODS}
    assert variance == {"fedavg": 2, "a": 1, "b": 3}
    assert not row(board, "p1", "a", "client_acc_variance").higher_is_better
    # all regimes: every converged (regime, seed) value, and the mean rank over the regimes
    all_a = row(board, lb.ALL, "a")
    assert (all_a["mean"], all_a["std"]) == pytest.approx((71.4, np.std([75, 78, 78, 62, 64], ddof=1)))
    assert all_a.seeds == 5 and all_a.diverged_seeds == 1 and "diverged: p2 seed 2" in all_a.note
    assert {m: row(board, lb.ALL, m)["rank"] for m in METHODS} == {"fedavg": 2, "a": 1, "b": 2.5}


def test_paired_tests_against_the_baseline_and_holm_over_the_table(board):
    # a vs fedavg in p1: differences 5, 6, 4 (mean 5, sd 1): t = 5 / (1 / √3)
    a1 = row(board, "p1", "a")
    assert (a1["diff"], a1.pairs, a1.t) == pytest.approx((5, 3, 5 * math.sqrt(3)))
    assert a1.p == pytest.approx(stats.ttest_rel([75, 78, 78], [70, 72, 74]).pvalue)
    # p2: a's diverged seed leaves 2 pairs (2, 3)
    a2 = row(board, "p2", "a")
    assert (a2["diff"], a2.pairs, a2.t) == pytest.approx((2.5, 2, 5.0))
    assert a2.p == pytest.approx(stats.ttest_rel([62, 64], [60, 61]).pvalue)
    # all regimes: paired over the 5 (regime, seed) pairs
    all_a = row(board, lb.ALL, "a")
    assert all_a.pairs == 5 and all_a.p == pytest.approx(
        stats.ttest_rel([75, 78, 78, 62, 64], [70, 72, 74, 60, 61]).pvalue
    )
    # Holm over the 6 comparisons of global_acc (a, b × p1, p2, all regimes); the baseline's rows have none
    acc = board[board.metric == "global_acc"]
    tested = acc[acc.method != "fedavg"]
    assert acc[acc.method == "fedavg"].p.isna().all() and tested.p.notna().all() and len(tested) == 6
    assert tested.p_holm.to_numpy() == pytest.approx(lb.holm(tested.p.to_numpy()))
    p = sorted(tested.p)
    assert tested.p_holm.min() == pytest.approx(6 * p[0])  # the smallest p times m
    # a in p1 has p = 0.013 < 0.05 but not after Holm (× 5); over all regimes (p = 0.0048 × 6 = 0.029) it is
    assert a1.p < 0.05 and a1.p_holm == pytest.approx(5 * a1.p) and not a1.significant
    assert all_a.significant and all_a.p_holm == pytest.approx(6 * all_a.p)
    assert list(tested[tested.significant].regime) == [lb.ALL]
    # the variance is its own family: lower is better, a's differences are negative
    assert row(board, "p1", "a", "client_acc_variance")["diff"] == pytest.approx(-9)


def test_the_leaderboard_is_written_with_every_number_in_the_csv(board, tmp_path):
    caption = lb.caption("T", "preset 'x'", board, 3, "best")
    lb.write_leaderboard(board, tmp_path / "lb", caption)
    csv = pd.read_csv(tmp_path / "lb.csv")
    assert len(csv) == 2 * (2 + 1) * 3 and {"mean", "std", "rank", "diff", "t", "p", "p_holm", "note"} <= set(csv)
    md = (tmp_path / "lb.md").read_text()
    assert "Holm" in caption and "3 seeds" in caption and "best-round protocol" in caption and "m = 6" in caption
    assert "77.00 ± 1.73 (+5.00)" in md and "71.40 ± 7.80 (+4.00*)" in md  # a in p1; a over all regimes
    shown = lb.layout(board)
    assert list(shown[shown.regime == "p2"].method) == ["a", "fedavg", "b"]  # by rank
    assert shown.set_index(["regime", "method"]).loc[("p2", "a"), "seeds"] == "2 (1 diverged)"
    assert "global_acc ↑" in shown and "client_acc_variance ↓" in shown
    # the html has both tables: the glance matrix (3 methods) and the layout, each with its header row
    assert (tmp_path / "lb.html").read_text().count("<tr") == (3 + 1) + (len(shown) + 1)


def test_the_glance_matrix_has_a_row_per_method_from_best_to_worst(board, tmp_path):
    glance = lb.matrix(board).set_index("method")  # the first metric: global_acc
    # a: +4.00 over all regimes (Holm-significant, p × 6), fedavg at 0, b: differences 1, −1, 0, −2, −2, 1 -> −0.50
    assert list(glance.index) == ["a", "fedavg", "b"]
    assert list(glance.columns) == ["p1", "p2", f"{lb.ALL} (diff)", "p Holm"]
    p_holm = f"{row(board, lb.ALL, 'a').p_holm:.2g}"
    assert list(glance.loc["a"]) == ["77.00 (+5.00)", "63.00 (+2.50)", "+4.00*", p_holm]
    assert list(glance.loc["fedavg"]) == ["72.00 ± 2.00", "61.00 ± 1.00", "—", ""]
    assert list(glance.loc["b"]) == ["72.00 (+0.00)", "60.00 (-1.00)", "-0.50", "1"]
    # lower is better for a variance: a's −9.40 is the best row, b's +9.00 the worst
    variance = lb.matrix(board[board.metric == "client_acc_variance"])
    assert list(variance.method) == ["a", "fedavg", "b"] and variance.iloc[0, 1] == "23.00 (-9.00*)"
    lb.write_leaderboard(board, tmp_path / "lb", "caption")
    md = (tmp_path / "lb.md").read_text()
    assert md.index("global_acc at a glance") < md.index("| a        | 77.00 (+5.00)") < md.index("| regime")


def test_the_gain_heatmap_draws_the_tables_numbers(tmp_path):
    cells = write_cells(tmp_path)
    kind = FIGURE_KINDS["gain_heatmap"]
    fig = {"output": "t/gain", "preset": "x", "datasets": ["d"], "partitions": ["p1", "p2"], "methods": METHODS,
           "seeds": [0, 1, 2], "metric": "global_acc", "labels": {"a": "A"}}  # fmt: skip
    ordered = kind.cells(fig)
    by_key = {(c["partition"], c["method"], c["seed"]): c["path"] for c in cells}
    files = [(by_key[(c["partition"], c["method"], c["seed"])], None) for c in ordered]
    kind.draw(fig, ordered, files, [], tmp_path / "g.png", tmp_path / "g.csv", "caption")
    assert (tmp_path / "g.png").stat().st_size > 0
    drawn = pd.read_csv(tmp_path / "g.csv")
    # the table of two metrics: the figure of one has its numbers (Holm's family is per metric)
    table = lb.leaderboard(
        collect_runs(cells), ["d"], ["p1", "p2"], METHODS, ["global_acc", "client_acc_variance"], "best"
    )
    want = lb.gains(table, "global_acc")
    assert list(drawn.regime) == ["p1", "p1", "p2", "p2", lb.ALL, lb.ALL] and set(drawn.label) == {"A", "b"}
    for column in ("diff", "p", "p_holm"):
        assert drawn[column].to_numpy() == pytest.approx(want[column].to_numpy())
    assert list(drawn.significant) == list(want.significant) and set(drawn.protocol) == {"best"}
    with pytest.raises(ValueError, match="baseline 'fedavg' is not among"):
        kind.cells({**fig, "methods": ["a", "b"]})


BASE = with_papers(yaml.safe_load((REPO / "config.yaml").read_text()), REPO / "config/papers")
SCHEMA = str(REPO / "workflow/schemas/config.schema.yaml")
LEADERBOARD = {
    "paper": "fedzda",
    "table": "Leaderboard",
    "output": "fedzda/leaderboard",
    "preset": "fedzda",
    "datasets": ["fmnist"],
    "partitions": ["unimodal", "multimodal"],
    "methods": ["fedavg", "fedprox", "fedzdac"],
    "metrics": ["global_acc"],
    "seeds": [0, 1, 2],
    "layout": "leaderboard",
    "published": False,
}


def checked(table=None, **config):
    cfg = copy.deepcopy(BASE)
    cfg["tables"]["board"] = {**LEADERBOARD, **(table or {})}
    for key, entries in config.items():  # figures, claims: added to the paper's
        cfg[key] = {**cfg.get(key, {}), **entries}
    validate(cfg, SCHEMA)
    return check_config(cfg)


def test_a_leaderboard_config_is_valid_and_defaults_to_the_paper_layout():
    assert checked() == []
    cfg = copy.deepcopy(BASE)
    validate(cfg, SCHEMA)
    assert cfg["tables"]["fedzda_table1"]["layout"] == "paper" and "baseline" not in cfg["tables"]["fedzda_table1"]
    assert any("fewer than 2 seeds" in w for w in checked({"seeds": [0]}))


@pytest.mark.parametrize(
    "table, message",
    [
        ({"baseline": "qffl"}, "baseline 'qffl' is not among the table's methods"),
        ({"methods": ["fedprox", "fedzdac"]}, "baseline 'fedavg' is not among the table's methods"),
        ({"published": True}, "a leaderboard has no paper values: set `published: false`"),
        ({"paper_method": {"fedavg": "FedAvg"}}, "paper_method compares with a paper"),
        ({"layout": "paper", "baseline": "fedavg"}, "`baseline` belongs to a leaderboard"),
        ({"layout": "paper", "analyses": True}, "`analyses` belongs to a leaderboard"),
        ({"last_rounds": 10}, "`last_rounds` belongs to a paper table"),
        ({"analyses": True, "contrasts": {"fedzdac": "qffl"}}, "contrast fedzdac against qffl: 'qffl' is not among"),
        ({"contrasts": {"fedzdac": "fedavg"}}, "contrasts are tested by the analyses"),
    ],
)
def test_leaderboard_keys_are_checked_before_any_job(table, message):
    with pytest.raises(ValueError, match=message):
        checked(table)


def test_an_unknown_layout_and_a_claim_on_a_leaderboard_are_rejected():
    with pytest.raises(Exception, match="'ranking' is not one of \\['paper', 'leaderboard'\\]"):
        checked({"layout": "ranking"})
    claim = {"paper": "fedzda", "statement": "s", "kind": "best_method", "source": "board", "metric": "global_acc"}
    with pytest.raises(ValueError, match="claim 'c': reads the leaderboard 'board'"):
        checked(claims={"c": {**claim, "methods": ["fedzdac"]}})


def test_a_heatmap_without_its_baseline_or_with_an_unknown_metric_is_rejected():
    fig = {"paper": "fedzda", "kind": "gain_heatmap", "output": "fedzda/gain", "datasets": ["fmnist"], "seeds": [0, 1]}
    fig |= {"preset": "fedzda", "partitions": ["unimodal"], "methods": ["fedprox", "fedzdac"]}
    with pytest.raises(ValueError, match="figure 'gain': baseline 'fedavg' is not among the figure's methods"):
        checked(figures={"gain": fig})
    with pytest.raises(ValueError, match="figure 'gain': metric: 'accuracy' is not one of"):
        checked(figures={"gain": {**fig, "methods": ["fedavg", "fedzdac"], "metric": "accuracy"}})
    assert checked(figures={"gain": {**fig, "methods": ["fedavg", "fedzdac"], "baseline": "fedavg"}}) == []


def test_the_glance_matrix_says_diverged_where_every_seed_of_a_method_diverged(tmp_path):
    """A method whose every seed diverged in a regime (FedDPMS under the head-to-head's shared SGD) reads
    "diverged (k of k)" there, and over all regimes where it diverged everywhere, never "nan"."""

    def glance(diverged: set[str]) -> pd.DataFrame:  # b diverges at every seed of these partitions
        cells = write_cells(tmp_path)
        for c in cells:
            if c["method"] == "b" and c["partition"] in diverged:
                record = json.loads(open(c["path"]).read())
                record |= {"diverged": True, "last": {"round": 2, "global_acc": None, "client_acc_variance": None}}
                open(c["path"], "w").write(json.dumps(record))
        board = lb.leaderboard(collect_runs(cells), ["d"], ["p1", "p2"], METHODS, ["global_acc"], "best")
        return lb.matrix(board).set_index("method")

    some = glance({"p2"})
    # p1: 71, 71, 74 against FedAvg's 70, 72, 74 -> +0.00; over all regimes those three pairs alone
    assert list(some.loc["b"])[:3] == ["72.00 (+0.00)", "diverged (3 of 3)", "+0.00"]
    every = glance({"p1", "p2"})
    assert list(every.loc["b"]) == ["diverged (3 of 3)", "diverged (3 of 3)", "diverged (6 of 6)", ""]
    assert list(every.index)[-1] == "b"  # untested: last


def test_a_cells_rank_and_difference_as_the_board_prints_them():
    """The board's text by hand: a rank (a mean over regimes with one decimal), "—" for a method with no rank; the
    paired difference with a star when significant after Holm, nothing when there is none."""
    from fed.reporting.leaderboard import _diff, _rank, _with_diff

    assert _rank(2.0, mean=False) == "2" and _rank(1.5, mean=True) == "1.5 (mean)" and _rank(math.nan, True) == "—"
    assert (
        _diff({"diff": 1.234, "significant": True}) == "+1.23*"
        and _diff({"diff": -0.5, "significant": False}) == "-0.50"
    )
    assert _diff({"diff": math.nan, "significant": False}) == ""
    assert _with_diff("81.2 ± 0.3", {"diff": 1.0, "significant": False}) == "81.2 ± 0.3 (+1.00)"
    assert _with_diff("81.2 ± 0.3", {"diff": math.nan, "significant": False}) == "81.2 ± 0.3"
