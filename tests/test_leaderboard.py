"""Leaderboards (fed.reporting.leaderboard) and the gain heat map on hand-computed numbers: 2 regimes × 3 methods ×
3 seeds of chosen metrics.json files, one seed diverged; the checks of a leaderboard's config keys."""

import copy
import json
import math
import warnings

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
    assert lb._rank(2.0, mean=False) == "2" and lb._rank(1.5, mean=True) == "1.5 (mean)"
    assert lb._rank(math.nan, True) == "—"
    assert (
        lb._diff({"diff": 1.234, "significant": True}) == "+1.23*"
        and lb._diff({"diff": -0.5, "significant": False}) == "-0.50"
    )
    assert lb._diff({"diff": math.nan, "significant": False}) == ""
    assert lb._with_diff("81.2 ± 0.3", {"diff": 1.0, "significant": False}) == "81.2 ± 0.3 (+1.00)"
    assert lb._with_diff("81.2 ± 0.3", {"diff": math.nan, "significant": False}) == "81.2 ± 0.3"


def long_form(cells: dict, tmp_path) -> pd.DataFrame:
    """``collect_runs`` of one metrics.json per cell, as the engine writes it: (dataset, partition, method, seed) ->
    (global_acc at the best round, local_acc_mean at the last round); "diverged": the run diverged after a best round
    of 99 (never to be read); "early": it diverged before its first evaluation, so it has no best round at all."""
    found = []
    for (d, p, m, s), v in cells.items():
        if v == "early":
            best, last = {}, {"round": 1, "global_acc": None, "local_acc_mean": None}
        elif v == "diverged":
            best, last = {"round": 1, "global_acc": 99.0}, {"round": 2, "global_acc": None, "local_acc_mean": None}
        else:
            best, last = {"round": 2, "global_acc": v[0]}, {"round": 3, "global_acc": v[0] - 10, "local_acc_mean": v[1]}
        path = tmp_path / f"{d}-{p}-{m}-{s}.json"
        record = {"config": {"report": "best"}, "best": best, "last": last, "diverged": v in ("diverged", "early")}
        path.write_text(json.dumps(record))
        found.append(dict(dataset=d, partition=p, method=m, seed=s, path=str(path)))
    return collect_runs(found)


def two_datasets(tmp_path) -> pd.DataFrame:
    """Two datasets of one partition. FedAvg diverged at d1's seed 2; the swept method prox picks prox_a in d1 and
    prox_b in d2 by its last-round local accuracy (70 > 60, 80 > 50); c has no run in d2; one has one seed per
    dataset, and in d2 a seed that diverged before its first evaluation."""
    cells = {("d1", "p", "fedavg", 0): (50, 0), ("d1", "p", "fedavg", 1): (52, 0), ("d1", "p", "fedavg", 2): "diverged"}
    cells |= {("d2", "p", "fedavg", s): (v, 0) for s, v in enumerate([60, 61, 62])}
    for d, variant, values, local in [
        ("d1", "prox_a", [55, 58, 60], 70), ("d1", "prox_b", [40, 40, 40], 60),
        ("d2", "prox_a", [63, 64, 66], 50), ("d2", "prox_b", [65, 66, 70], 80),
        ("d1", "c", [51, 55, 57], 0),
    ]:  # fmt: skip
        cells |= {(d, "p", variant, s): (v, local) for s, v in enumerate(values)}
    cells |= {("d1", "p", "one", 0): (49, 0), ("d2", "p", "one", 0): (59, 0), ("d2", "p", "one", 1): "early"}
    return long_form(cells, tmp_path)


def test_a_board_of_two_datasets_with_a_swept_method_row_by_row(tmp_path):
    """Every row of a board by hand: regimes labelled "dataset/partition", the swept method's variant per regime
    (chosen with the default ``select_by``) and "per regime" over all regimes, a diverged baseline seed that leaves
    a method's seed unpaired, a method with no runs, one with a single pair (no test) and one whose differences are
    all −1 (zero spread: p = 0), and every note in its order."""
    methods = ["fedavg", "prox", "c", "one"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no mean of nothing: a cell with no pair has no difference
        board = lb.leaderboard(two_datasets(tmp_path), ["d1", "d2"], ["p"], methods, ["global_acc"], "best",
                               sweeps={"prox": ["prox_a", "prox_b"]})  # fmt: skip
    assert list(board.columns) == [*lb.COLUMNS[:4], "variant", *lb.COLUMNS[4:]]
    unpaired = "baseline missing or diverged: {} (not paired)".format
    lost = "diverged: {} (not averaged in, not paired)".format
    no_test = "no test: fewer than 2 paired seeds"
    nan = math.nan
    # regime, method, dataset, partition, variant, mean, seeds, diverged seeds, rank, diff, pairs, t, note
    expected = [
        ("d1/p", "fedavg", "d1", "p", nan, 51, 2, 1, 3, nan, 2, nan, f"baseline; {lost('seed 2')}"),
        ("d1/p", "prox", "d1", "p", "prox_a", 173 / 3, 3, 0, 1, 5.5, 2, 11, unpaired("seed 2")),  # (5 + 6) / 2
        ("d1/p", "c", "d1", "p", nan, 163 / 3, 3, 0, 2, 2, 2, 2, unpaired("seed 2")),  # (1 + 3) / 2, sd_d √2
        ("d1/p", "one", "d1", "p", nan, 49, 1, 0, 4, -1, 1, nan, no_test),
        ("d2/p", "fedavg", "d2", "p", nan, 61, 3, 0, 2, nan, 3, nan, "baseline"),
        ("d2/p", "prox", "d2", "p", "prox_b", 67, 3, 0, 1, 6, 3, 6, ""),  # 5, 5, 8: sd_d √3
        ("d2/p", "c", "d2", "p", nan, nan, 0, 0, nan, nan, 0, nan, "no runs"),
        ("d2/p", "one", "d2", "p", nan, 59, 1, 1, 3, -1, 1, nan, f"{lost('seed 1')}; {no_test}"),
        (lb.ALL, "fedavg", "all", lb.ALL, nan, 57, 5, 1, 2.5, nan, 5, nan, f"baseline; {lost('d1/p seed 2')}"),
        (lb.ALL, "prox", "all", lb.ALL, "per regime", 374 / 6, 6, 0, 1, 5.8, 5, 5.8 / math.sqrt(1.7 / 5),
         unpaired("d1/p seed 2")),  # differences 5, 6, 5, 5, 8: variance 6.8 / 4
        (lb.ALL, "c", "all", lb.ALL, nan, 163 / 3, 3, 0, 2, 2, 2, 2, unpaired("d1/p seed 2")),  # its one rank
        (lb.ALL, "one", "all", lb.ALL, nan, 54, 2, 1, 3.5, -1, 2, -math.inf, lost("d2/p seed 1")),
    ]  # fmt: skip
    columns = ["regime", "method", "dataset", "partition", "variant", "mean", "seeds", "diverged_seeds", "rank", "diff",
               "pairs", "t", "note"]  # fmt: skip
    for got, want in zip(board[columns].itertuples(index=False), expected, strict=True):
        assert list(got) == pytest.approx(list(want), nan_ok=True), want[:2]
    # Holm over the six tests (prox and c in d1, prox in d2, prox, c and one over all regimes); one's p = 0 stays 0
    tested = board[board.p.notna()]
    assert list(zip(tested.regime, tested.method)) == [
        ("d1/p", "prox"), ("d1/p", "c"), ("d2/p", "prox"), (lb.ALL, "prox"), (lb.ALL, "c"), (lb.ALL, "one")
    ]  # fmt: skip
    assert tested.p_holm.to_numpy() == pytest.approx(lb.holm(tested.p.to_numpy()))
    assert row(board, lb.ALL, "one").p == 0 and row(board, lb.ALL, "one").significant
    # its layout: the variant column ("" for a method not swept), ranks, p Holm, seeds
    shown = lb.layout(board)
    assert list(shown.columns) == [
        "regime", "rank", "method", "variant", "global_acc ↑", "p Holm (global_acc)", "seeds", "note"
    ]  # fmt: skip
    d2 = shown[shown.regime == "d2/p"].set_index("method")
    assert list(d2.index) == ["prox", "fedavg", "one", "c"]  # by rank, no rank last
    assert list(d2["rank"]) == ["1", "2", "3", "—"] and list(d2.variant) == ["prox_b", "", "", ""]
    assert list(d2.seeds) == ["3", "3", "1 (1 diverged)", "0"]
    assert d2.loc["fedavg", "p Holm (global_acc)"] == "" and d2.loc["c", "global_acc ↑"] == "—"
    everywhere = shown[shown.regime == lb.ALL].set_index("method")
    assert list(everywhere["rank"]) == ["1.0 (mean)", "2.0 (mean)", "2.5 (mean)", "3.5 (mean)"]
    assert everywhere.loc["prox", "variant"] == "per regime"
    # a swept method none of whose variants ran in a regime has no variant there, and says "no runs"
    alone = lb.leaderboard(
        two_datasets(tmp_path), ["d1"], ["p"], ["fedavg", "q"], ["global_acc"], "best", sweeps={"q": ["q_a"]}
    )
    assert row(alone, "p", "q").variant == "" and row(alone, "p", "q").note == "no runs"
    assert lb.layout(alone).set_index("method").loc["q", "variant"].tolist() == ["", "per regime"]


def test_several_lost_seeds_are_listed_in_one_note(tmp_path):
    """FedAvg diverged at seeds 2 and 3: its note lists both, and a method that converged there has both unpaired."""
    cells = {("d", "p", "fedavg", s): v for s, v in enumerate([(60, 0), (61, 0), "diverged", "diverged"])}
    cells |= {("d", "p", "m", s): (62 + s, 0) for s in range(4)}
    board = lb.leaderboard(long_form(cells, tmp_path), ["d"], ["p"], ["fedavg", "m"], ["global_acc"], "best")
    assert row(board, "p", "fedavg").note == "baseline; diverged: seed 2, seed 3 (not averaged in, not paired)"
    assert row(board, "p", "m").note == "baseline missing or diverged: seed 2, seed 3 (not paired)"
    assert row(board, lb.ALL, "m").dataset == "d"  # one dataset: its all-regimes rows keep its name


def test_the_layout_whole_regimes_in_table_order_and_the_first_metrics_p(board):
    """The layout row by row: regimes in the table's order (all regimes last), methods by the first metric's rank
    (ties in the table's method order), the first metric's Holm-adjusted p (a's in p1: 0.013 × 5; in p2: 0.126 × 4;
    over all regimes 0.0048 × 6; b's capped at 1), the seeds and the notes."""
    shown = lb.layout(board)
    assert list(shown.columns) == [
        "regime", "rank", "method", "global_acc ↑", "client_acc_variance ↓", "p Holm (global_acc)", "seeds", "note"
    ]  # fmt: skip
    assert list(zip(shown.regime, shown["rank"], shown.method)) == [
        ("p1", "1", "a"), ("p1", "2", "fedavg"), ("p1", "2", "b"),
        ("p2", "1", "a"), ("p2", "2", "fedavg"), ("p2", "3", "b"),
        (lb.ALL, "1.0 (mean)", "a"), (lb.ALL, "2.0 (mean)", "fedavg"), (lb.ALL, "2.5 (mean)", "b"),
    ]  # fmt: skip
    assert list(shown["p Holm (global_acc)"]) == ["0.0654", "", "1", "0.503", "", "1", "0.0289", "", "1"]
    assert list(shown.seeds) == ["3", "3", "3", "2 (1 diverged)", "3", "3", "5 (1 diverged)", "6", "6"]
    assert list(shown.note) == [
        "", "baseline", "", "diverged: seed 2 (not averaged in, not paired)", "baseline", "",
        "diverged: p2 seed 2 (not averaged in, not paired)", "baseline", "",
    ]  # fmt: skip
    variance = ["23.00 ± 3.61 (-9.00*)", "32.00 ± 2.00", "41.00 ± 1.00 (+9.00*)"]  # p1: ±9, significant after Holm
    assert list(shown["client_acc_variance ↓"])[:3] == variance


def test_the_caption_says_what_was_tested_for_every_metric(board, tmp_path):
    """The caption word for word; with metrics of different test counts it gives each its m (a metric with no test:
    m = 0), and the direction is the first metric's."""
    assert lb.caption("T", "preset 'x'", board, 3, "best") == (
        "T. Mean ± sample std over 3 seeds (best-round protocol), preset 'x'. Rank: per regime by global_acc (higher "
        "is better; 'all regimes': the mean rank). In brackets: the mean paired difference to fedavg over the seeds "
        "where both converged; * significant at α = 0.05 by a two-sided paired t-test over seeds (the same seed is "
        "the same partition draw and initialisation; 'all regimes': over every (regime, seed) pair), p-values "
        "Holm-corrected over the comparisons of each metric (m = 6: every method but fedavg, in every regime and over "
        "all regimes). Diverged seeds are never averaged in nor paired; their row says so. The CSV has every number "
        "(t, p, adjusted p)."
    )
    runs = collect_runs(write_cells(tmp_path))
    metrics = ["client_acc_variance", "global_acc"]
    uneven = lb.leaderboard(runs, ["d"], ["p1", "p2"], METHODS, metrics, "last")
    uneven.loc[uneven.metric == "global_acc", "p"] = math.nan  # no test of global_acc
    variance = uneven.metric == "client_acc_variance"
    uneven.loc[variance & (uneven.method == "b") & (uneven.regime == "p1"), "p"] = math.nan  # 5 of variance's 6
    text = lb.caption("T", "s", uneven, 3, "last")
    assert "(last-round protocol)" in text and "by client_acc_variance (lower is better;" in text
    assert "(client_acc_variance: m = 5, global_acc: m = 0: every method but fedavg" in text
    one = lb.leaderboard(runs, ["d"], ["p1"], ["fedavg", "a"], ["global_acc"], "best")
    assert "(m = 2: every method but fedavg" in lb.caption("T", "s", one, 3, "best")


def test_ties_keep_the_tables_method_order_however_many_methods(tmp_path):
    """Twenty methods, every other one 10 points above FedAvg at both seeds and the rest equal to it: the layout's
    rank ties and the glance's equal differences keep the table's method order (a stable sort; numpy's quicksort
    reorders ties beyond 16 items)."""
    methods = [f"m{i:02d}" for i in range(20)]
    cells = {("d", "p", "fedavg", s): (60 + s, 0) for s in (0, 1)}
    cells |= {("d", "p", m, s): (60 + s + (10 if i % 2 == 0 else 0), 0) for i, m in enumerate(methods) for s in (0, 1)}
    board = lb.leaderboard(long_form(cells, tmp_path), ["d"], ["p"], ["fedavg", *methods], ["global_acc"], "best")
    expected = methods[0::2] + ["fedavg"] + methods[1::2]
    shown = lb.layout(board)
    assert list(shown[shown.regime == "p"].method) == expected
    assert list(shown[shown.regime == lb.ALL].method) == expected
    assert list(lb.matrix(board).method) == expected


def test_the_gains_the_glance_title_and_a_baseline_not_in_the_table(board, tmp_path):
    gains = lb.gains(board, "global_acc")
    assert list(gains.columns) == ["regime", "dataset", "partition", "method", "metric", "baseline", "mean", "diff",
                                   "pairs", "t", "p", "p_holm", "significant", "note"]  # fmt: skip
    assert list(gains.index) == list(range(6)) and list(gains.method) == ["a", "b"] * 3
    lb.write_leaderboard(board, tmp_path / "lb", "caption")
    assert (
        "global_acc at a glance: mean over seeds, in brackets the mean paired difference to the baseline, * "
        "significant after Holm; p Holm: the comparison over all regimes"
    ) in (tmp_path / "lb.md").read_text()
    with pytest.raises(ValueError, match=r"^the baseline 'x' is not among the methods \['a', 'b'\]$"):
        lb.leaderboard(board, ["d"], ["p1"], ["a", "b"], ["global_acc"], "best", baseline="x")


def test_an_adjusted_p_equal_to_alpha_is_not_significant(tmp_path, monkeypatch):
    """Significant means p_holm < α, as for the claims: two tests of p = 0.025 adjust to exactly 0.05."""
    monkeypatch.setattr(lb, "paired_t", lambda x, y: (1.0, 0.025))
    runs = collect_runs(write_cells(tmp_path))
    board = lb.leaderboard(runs, ["d"], ["p1"], ["fedavg", "a"], ["global_acc"], "best")
    tested = board[board.method == "a"]
    assert list(tested.p_holm) == [lb.ALPHA, lb.ALPHA] and not tested.significant.any()
