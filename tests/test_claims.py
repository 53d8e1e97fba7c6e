"""Claims are tested over seeds: supported, contradicted or inconclusive, never assumed."""

import math

import pandas as pd
import pytest

from fed.reporting.claims import (
    CONTRADICTED,
    INCONCLUSIVE,
    NOT_RUN,
    SUPPORTED,
    best_method,
    claims_table,
    margin_count,
    trend,
)


def table(rows):
    return pd.DataFrame(
        [
            dict(
                dataset="fmnist", partition=p, method=m, metric="local_acc_mean", ours_mean=mean, ours_std=std, seeds=n
            )
            for p, m, mean, std, n in rows
        ],
        columns=["dataset", "partition", "method", "metric", "ours_mean", "ours_std", "seeds"],
    )


CLAIM = {"metric": "local_acc_mean", "methods": ["fedzdac", "fedzdas"]}


def test_best_method_supported_contradicted_inconclusive():
    clear_win = table([("uni", "fedzdac", 86.0, 0.3, 3), ("uni", "fedavg", 84.0, 0.3, 3)])
    assert best_method(clear_win, CLAIM)["verdict"] == SUPPORTED
    clear_loss = table([("uni", "fedzdac", 83.1, 0.3, 3), ("uni", "fedavg", 85.0, 0.3, 3)])
    assert best_method(clear_loss, CLAIM)["verdict"] == CONTRADICTED  # the paper's own Table 2 unimodal case
    noisy = table([("uni", "fedzdac", 86.0, 3.0, 3), ("uni", "fedavg", 85.0, 3.0, 3)])
    assert best_method(noisy, CLAIM)["verdict"] == INCONCLUSIVE
    one_seed = table([("uni", "fedzdac", 90.0, float("nan"), 1), ("uni", "fedavg", 80.0, float("nan"), 1)])
    untested = best_method(one_seed, CLAIM)
    assert untested["verdict"] == INCONCLUSIVE  # no test with a single seed, and the evidence says so
    assert untested["evidence"] == "fmnist/uni: fedzdac 90.00 vs fedavg 80.00 (no test: fewer than 2 seeds)"
    assert "(p=0.0" in best_method(clear_win, CLAIM)["evidence"]
    mixed = pd.concat([clear_win, clear_loss.assign(partition="multi")])
    assert best_method(mixed, CLAIM)["verdict"] == CONTRADICTED  # "in both partitions"
    lower = best_method(clear_loss, CLAIM | {"higher_is_better": False})
    assert lower["verdict"] == SUPPORTED and "fedzdac 83.10 vs fedavg 85.00" in lower["evidence"]


def test_trend_and_claims_table():
    fig5 = pd.DataFrame(
        [
            dict(dataset="fmnist", start_round=r, seed=s, diverged=False, client_acc_variance=v)
            for r, vals in [(80, [200, 210, 205]), (90, [260, 270, 250]), (95, [300, 310, 320])]
            for s, v in enumerate(vals)
        ]
    )
    claim = {"x": "start_round", "metric": "client_acc_variance", "decreasing": False}
    assert trend(fig5, claim)["verdict"] == SUPPORTED  # earlier start, lower variance
    assert trend(fig5, claim | {"decreasing": True})["verdict"] == CONTRADICTED
    claims = {
        "c": {"kind": "trend", "source": "fig5", "statement": "s", **claim},
        "d": {"kind": "best_method", "source": "t1", "statement": "s", **CLAIM},
    }
    out = claims_table(claims, {"fig5": fig5, "t1": table([])}, {"fig5": "12 of 100 rounds"})
    assert list(out.verdict) == [SUPPORTED, NOT_RUN]
    assert list(out.setting) == ["not comparable (12 of 100 rounds)", "paper protocol"]


def test_correlation_claim_over_classes():
    from fed.reporting.claims import correlation

    claim = {"x": "model_acc", "metric": "oracle_acc"}
    acc = [95.0, 90, 85, 80, 70, 60, 50, 40, 30, 10]
    rising = pd.DataFrame({"dataset": "fmnist", "model_acc": acc, "oracle_acc": [a * 0.9 for a in acc]})
    result = correlation(rising, claim)
    assert result["verdict"] == SUPPORTED and "ρ(model_acc, oracle_acc) = 1.00 over 10 rows" in result["evidence"]
    falling = rising.assign(oracle_acc=[100 - a for a in acc])
    assert correlation(falling, claim)["verdict"] == CONTRADICTED
    unrelated = rising.assign(oracle_acc=[50.0, 10, 90, 30, 70, 20, 80, 40, 60, 45])  # ρ ≈ −0.03
    assert correlation(unrelated, claim)["verdict"] == INCONCLUSIVE
    assert correlation(rising.head(2), claim)["verdict"] == NOT_RUN  # too few classes to test


def test_trend_over_a_tables_methods_and_best_method_filters():
    # DA-FL Table 4: accuracy per ε0, one method per budget; ε0 = ∞ sorts last
    t4 = table(
        [("1-label", "eps1", 58.0, 1.0, 3), ("1-label", "eps50", 75.0, 1.0, 3), ("1-label", "epsinf", 88.0, 1.0, 3)]
    )
    claim = {
        "x": "epsilon",
        "metric": "local_acc_mean",
        "decreasing": False,
        "x_values": {"eps1": 1, "eps50": 50, "epsinf": float("inf")},
    }
    result = trend(t4, claim)
    assert result["verdict"] == SUPPORTED and "epsilon=1 58.00 vs epsilon=inf 88.00" in result["evidence"]
    assert trend(t4, claim | {"decreasing": True})["verdict"] == CONTRADICTED
    assert trend(t4, claim | {"partitions": ["2-label"]})["verdict"] == NOT_RUN
    # centralized training is an upper bound, not a rival: excluded, DA-FL's win over the baselines is supported
    t3 = table(
        [
            ("1-label", "fedzdac", 75.0, 0.5, 3),
            ("1-label", "fedavg", 50.0, 0.5, 3),
            ("1-label", "centralized", 90.0, 0.5, 3),
            ("dir", "fedavg", 97.0, 0.5, 3),
            ("dir", "fedzdac", 96.0, 0.5, 3),
        ]
    )
    assert best_method(t3, CLAIM)["verdict"] == CONTRADICTED
    assert best_method(t3, CLAIM | {"exclude": ["centralized"]})["verdict"] == CONTRADICTED  # dir: fedavg wins
    assert best_method(t3, CLAIM | {"exclude": ["centralized"], "partitions": ["1-label"]})["verdict"] == SUPPORTED


def test_no_gain_against_a_margin():
    from fed.reporting.claims import no_gain

    def fig(low, high, std=0.2):  # FedDPMS' accuracy vs P: three seeds at P = 5 and at P = 20
        return pd.DataFrame(
            [
                dict(dataset="fmnist", x=x, seed=s, global_acc=v + d, diverged=False)
                for x, v in ((5, low), (20, high))
                for s, d in enumerate((-std, 0.0, std))
            ]
        )

    claim = {"x": "x", "metric": "global_acc", "margin": 1.0}
    assert no_gain(fig(80.0, 80.2), claim)["verdict"] == SUPPORTED  # +0.2 pp, clearly under the 1 pp margin
    assert no_gain(fig(80.0, 83.0), claim)["verdict"] == CONTRADICTED  # +3 pp: more rounds did help
    assert no_gain(fig(80.0, 81.0, std=2.0), claim)["verdict"] == INCONCLUSIVE
    assert "change +0.20 vs margin +1" in no_gain(fig(80.0, 80.2), claim)["evidence"]


def test_small_loss_against_a_margin():
    from fed.reporting.claims import small_loss

    def fig(low, high, std=0.2):  # FLea's accuracy at lambda2 = 0 and lambda2 = 3, three seeds each
        return pd.DataFrame(
            [
                dict(dataset="fmnist", x=x, seed=s, global_acc=v + d, diverged=False)
                for x, v in ((0, low), (3, high))
                for s, d in enumerate((-std, 0.0, std))
            ]
        )

    claim = {"x": "x", "metric": "global_acc", "margin": 2.0}
    assert small_loss(fig(70.0, 69.5), claim)["verdict"] == SUPPORTED  # −0.5 pp: within the 2 pp allowed
    assert small_loss(fig(70.0, 71.0), claim)["verdict"] == SUPPORTED  # a gain is no loss
    assert small_loss(fig(70.0, 65.0), claim)["verdict"] == CONTRADICTED  # −5 pp
    assert small_loss(fig(70.0, 68.0, std=2.0), claim)["verdict"] == INCONCLUSIVE
    assert "change -0.50 vs margin -2" in small_loss(fig(70.0, 69.5), claim)["evidence"]


def test_gap_trend_pairs_seeds_and_picks_the_best_rival_at_each_end():
    from fed.reporting.claims import gap_trend

    def fig(rows):
        return pd.DataFrame(
            [
                dict(dataset="fmnist", x=x, line=line, seed=s, global_acc=v + 0.1 * s, diverged=False)
                for x, line, v in rows
                for s in range(3)
            ]
        )

    claim = {"metric": "global_acc", "methods": ["feddpms"]}
    # lead of 5 pp at beta 0.1 over the best rival (fedprox, not fedavg), 0.5 pp at beta 0.5
    narrowing = fig(
        [
            (0.1, "feddpms", 70.0),
            (0.1, "fedavg", 60.0),
            (0.1, "fedprox", 65.0),
            (0.5, "feddpms", 85.5),
            (0.5, "fedavg", 85.0),
            (0.5, "fedprox", 80.0),
        ]
    )
    out = gap_trend(narrowing, claim)
    assert out["verdict"] == SUPPORTED and "+5.00 at x=0.1 vs +0.50 at x=0.5" in out["evidence"]
    widening = fig([(0.1, "feddpms", 60.5), (0.1, "fedavg", 60.0), (0.5, "feddpms", 90.0), (0.5, "fedavg", 85.0)])
    assert gap_trend(widening, claim)["verdict"] == CONTRADICTED
    assert gap_trend(fig([(0.1, "feddpms", 70.0), (0.1, "fedavg", 60.0)]), claim)["verdict"] == NOT_RUN


def test_margin_count_counts_cells_beyond_a_relative_margin_across_tables():
    flea = {"metric": "local_acc_mean", "methods": ["flea"], "exclude": ["feddata"], "margin": 0.05, "fraction": 0.72}

    def block(gains):  # one cell per gain: flea = fedavg·(1 + gain), 5 seeds, std 0.2; feddata is never a rival
        rows = []
        for i, g in enumerate(gains):
            rows += [(f"p{i}", "fedavg", 40.0, 0.2, 5), (f"p{i}", "flea", 40.0 * (1 + g), 0.2, 5)]
            rows += [(f"p{i}", "feddata", 99.0, 0.2, 5)]
        return table(rows)

    ok = block([0.10] * 13 + [0.0] * 5)  # 13 of 18 cells clearly above +5 %
    result = margin_count(ok, flea)
    assert result["verdict"] == SUPPORTED and result["evidence"].startswith("13 of 18 cells significantly above +5%")
    assert margin_count(block([0.10] * 12 + [0.0] * 6), flea)["verdict"] == CONTRADICTED  # 6 clearly below: ≤ 12
    assert margin_count(block([0.10] * 12 + [0.05] * 6), flea)["verdict"] == INCONCLUSIVE  # at the margin: untested
    assert margin_count(block([0.10] * 2), flea | {"methods": ["nobody"]})["verdict"] == NOT_RUN

    # several tables read together: the same (dataset, partition) in two scarcity blocks are two cells
    claims = {"c": {**flea, "kind": "margin_count", "statement": "s", "source": ["d100", "d50"]}}
    out = claims_table(claims, {"d100": block([0.10] * 3), "d50": block([0.10] * 3)}, {"d50": "quick"})
    assert out.verdict[0] == SUPPORTED and "6 of 6 cells" in out.evidence[0] and "(d50)" in out.evidence[0]
    assert out.setting[0] == "not comparable (quick)"


def test_a_users_method_is_shown_but_never_a_rival_of_the_papers_claims():
    """Issue 26: adding a method to a paper's table must not flip the paper's verdicts. ``with_rivals`` makes every
    best-method claim of a paper's file compare the file's own methods; an overlay may name others."""
    from fed.config import with_rivals

    paper = {
        "methods": {"fedzdac": {}, "fedzdas": {}},
        "tables": {"t1": {"methods": ["fedavg", "fedprox", "fedzdac", "fedzdas"]}},
        "claims": {
            "best": {"kind": "best_method", "source": "t1", **CLAIM},
            "trend": {"kind": "trend", "source": "t1"},
        },
    }
    claims = with_rivals(paper)["claims"]
    assert claims["best"]["rivals"] == ["fedavg", "fedprox", "fedzdac", "fedzdas"] and "rivals" not in claims["trend"]
    rows = table([("uni", "fedzdac", 86.0, 0.3, 3), ("uni", "fedavg", 84.0, 0.3, 3), ("uni", "mine", 90.0, 0.3, 3)])
    assert best_method(rows, CLAIM)["verdict"] == CONTRADICTED  # without rivals the user's method would flip it
    assert best_method(rows, claims["best"])["verdict"] == SUPPORTED
    assert best_method(rows, claims["best"] | {"rivals": ["fedavg", "mine"]})["verdict"] == CONTRADICTED  # named
    cells = margin_count(rows, claims["best"] | {"margin": 0.01, "fraction": 1.0})
    assert "over fedavg" in cells["evidence"] and "mine" not in cells["evidence"]
    from conftest import REPO

    from fed.config import with_papers

    merged = with_papers(
        {"papers": ["fedzda"], "tables": {"fedzda_table1": {"methods": ["mine"]}}}, REPO / "config/papers"
    )
    assert "fedzdac" in merged["claims"]["zda_best_local_accuracy"]["rivals"]
    assert "mine" not in merged["claims"]["zda_best_local_accuracy"]["rivals"]


def test_a_figure_that_attacks_several_rounds_tests_each_round_on_its_own():
    """FLea Fig. 9c with ``rounds``: one row per seed and attacked round; pooling the rounds would count each seed
    twice. Round 1 loses 5 pp, round 10 none: the claim is contradicted at round 1 alone, and says so."""
    from fed.reporting.claims import small_loss

    rows = [
        dict(dataset="fmnist", round=r, x=x, seed=s, attacked_acc=70.0 - (5.0 if (r, x) == (1, 3) else 0.0) + d)
        for r in (1, 10)
        for x in (0, 3)
        for s, d in enumerate((-0.2, 0.0, 0.2))
    ]
    out = small_loss(pd.DataFrame(rows).assign(diverged=False), {"x": "x", "metric": "attacked_acc", "margin": 2.0})
    assert out["verdict"] == CONTRADICTED
    assert "fmnist, round 1: attacked_acc at x=0 70.00 vs x=3 65.00" in out["evidence"]
    assert "fmnist, round 10: attacked_acc at x=0 70.00 vs x=3 70.00" in out["evidence"]


def test_a_cell_s_own_metric_in_a_figure_of_several_rounds_is_tested_once_a_seed():
    """The same CSV's ``global_acc`` is the cell's final accuracy, repeated on each attacked round's row: tested per
    round it would print the same evidence twice, pooled it would count each seed twice. One group, one row a seed:
    the p-value of the rows of one round alone."""
    from fed.reporting.claims import small_loss

    acc = {(0, 0): 70.1, (0, 1): 69.6, (0, 2): 70.3, (3, 0): 69.0, (3, 1): 67.9, (3, 2): 68.6}
    rows = [dict(dataset="fmnist", round=r, x=x, seed=s, global_acc=a) for r in (1, 10) for (x, s), a in acc.items()]
    claim = {"x": "x", "metric": "global_acc", "margin": 2.0}
    out = small_loss(pd.DataFrame(rows).assign(diverged=False), claim)
    once = small_loss(
        pd.DataFrame([r for r in rows if r["round"] == 1]).drop(columns="round").assign(diverged=False), claim
    )
    assert out["evidence"] == once["evidence"] and out["verdict"] == once["verdict"]
    assert "round" not in out["evidence"] and out["evidence"].count("fmnist: global_acc at x=0 70.00 vs x=3 68.50") == 1


# ---- the statistical rules themselves, by hand (each case is one a wrong rule would answer otherwise)


def test_better_is_welchs_one_sided_t_by_hand():
    """Welch: m = 10 vs 8, s = 1 vs 3, n = 3 vs 5: se² = 1/3 + 9/5, t = 2/se, ν = se⁴ / ((1/3)²/2 + (9/5)²/4)
    (Student's pooled t gives another p here); lower is better flips the side; a side of one seed is not tested."""
    from scipy import stats

    from fed.reporting.claims import better

    se2 = 1 / 3 + 9 / 5
    nu = se2**2 / ((1 / 3) ** 2 / 2 + (9 / 5) ** 2 / 4)
    p = stats.t.sf(2 / math.sqrt(se2), nu)
    assert nu == pytest.approx(5.2581, abs=1e-4)
    assert better(10, 1, 3, 8, 3, 5) == pytest.approx(p, rel=1e-9)
    assert better(8, 3, 5, 10, 1, 3, higher=False) == pytest.approx(p, rel=1e-9)
    assert better(10, 1, 3, 8, 3, 5, higher=False) == pytest.approx(1 - p, rel=1e-9)
    assert math.isfinite(better(10, 1, 2, 8, 1, 2))  # two seeds a side: tested
    assert math.isnan(better(10, 1, 1, 8, 1, 3)) and math.isnan(better(10, 1, 3, 8, 1, 1))
    assert math.isnan(better(10, math.nan, 3, 8, 1, 3))


def test_better_with_no_spread_on_both_sides_is_decided_by_the_means_alone():
    from fed.reporting.claims import better

    assert better(10, 0, 3, 8, 0, 3) == 0.0 and better(8, 0, 3, 10, 0, 3) == 1.0 and better(8, 0, 3, 8, 0, 3) == 1.0
    assert better(8, 0, 3, 10, 0, 3, higher=False) == 0.0
    # spread on one side only: Welch's t, not the rule of no spread
    assert 0.0 < better(10, 0, 3, 8, 1, 3) < 0.05 and 0.0 < better(10, 1, 3, 8, 0, 3) < 0.05


def test_a_p_value_equal_to_alpha_is_not_significant(monkeypatch):
    """Significant means p < α = 0.05: a test at exactly α supports and contradicts nothing, in every kind."""
    from fed.reporting import claims as c

    monkeypatch.setattr(c, "better", lambda *args, **kwargs: c.ALPHA)
    rows = table([("uni", "fedzdac", 86.0, 0.3, 3), ("uni", "fedavg", 84.0, 0.3, 3)])
    assert c.best_method(rows, CLAIM)["verdict"] == INCONCLUSIVE
    fig = pd.DataFrame(
        [dict(dataset="d", x=x, seed=s, m=x + 0.1 * s, diverged=False) for x in (1, 2) for s in range(3)]
    )
    assert c.trend(fig, {"x": "x", "metric": "m"})["verdict"] == INCONCLUSIVE
    lines = pd.DataFrame(
        [dict(dataset="d", x=x, line=ln, seed=s, m=v + s, diverged=False)
         for x in (1, 2) for ln, v in (("a", 5.0 * x), ("b", 1.0)) for s in range(3)]
    )  # fmt: skip
    assert c.gap_trend(lines, {"metric": "m", "methods": ["a"]})["verdict"] == INCONCLUSIVE
    counted = c.margin_count(rows, CLAIM | {"margin": 0.01, "fraction": 1.0})
    assert counted["verdict"] == INCONCLUSIVE and counted["evidence"].startswith("0 of 1 cells")
    from types import SimpleNamespace

    from scipy import stats

    monkeypatch.setattr(stats, "spearmanr", lambda *a, **k: SimpleNamespace(statistic=0.5, pvalue=c.ALPHA))
    ranked = pd.DataFrame({"dataset": "d", "x": [1.0, 2, 3, 4], "m": [1.0, 3, 2, 4]})
    assert c.correlation(ranked, {"x": "x", "metric": "m"})["verdict"] == INCONCLUSIVE


def test_best_method_when_lower_is_better_picks_the_lowest_of_several_and_can_be_contradicted():
    rows = table(
        [
            ("uni", "fedzdac", 5.0, 0.1, 3),
            ("uni", "fedzdas", 9.0, 0.1, 3),
            ("uni", "fedavg", 7.0, 0.1, 3),
            ("uni", "fedprox", 6.0, 0.1, 3),
        ]
    )
    lower = CLAIM | {"higher_is_better": False}
    won = best_method(rows, lower)
    assert won["verdict"] == SUPPORTED and won["evidence"].startswith("fmnist/uni: fedzdac 5.00 vs fedprox 6.00")
    lost = best_method(rows[rows.method != "fedzdac"], lower)
    assert lost["verdict"] == CONTRADICTED and "fedzdas 9.00 vs fedprox 6.00" in lost["evidence"]
    assert best_method(rows, CLAIM)["evidence"].startswith("fmnist/uni: fedzdas 9.00 vs fedavg 7.00")  # higher


def test_best_method_skips_a_cell_with_no_rival_left_and_goes_on_in_table_order():
    """A rival whose every seed diverged (seeds 0, no mean) is no rival: its cell is skipped, the next ones are
    read, and the evidence follows the table's order."""
    rows = table(
        [
            ("uni", "fedzdac", 86.0, 0.3, 3),
            ("uni", "fedavg", math.nan, math.nan, 0),
            ("zeta", "fedzdac", 86.0, 0.3, 3),
            ("zeta", "fedavg", 84.0, 0.3, 3),
            ("alpha", "fedzdac", 86.0, 0.3, 3),
            ("alpha", "fedavg", 84.0, 0.3, 3),
        ]
    )
    out = best_method(rows, CLAIM)
    assert (
        out["verdict"] == SUPPORTED
        and out["evidence"].startswith("fmnist/zeta")
        and "fmnist/uni" not in out["evidence"]
    )
    assert out["evidence"].index("fmnist/zeta") < out["evidence"].index("fmnist/alpha")
    assert best_method(rows.head(2), CLAIM) == {"verdict": NOT_RUN, "evidence": ""}


def test_datasets_restrict_a_claim():
    rows = pd.concat(
        [
            table([("uni", "fedzdac", 86.0, 0.3, 3), ("uni", "fedavg", 84.0, 0.3, 3)]),
            table([("uni", "fedzdac", 80.0, 0.3, 3), ("uni", "fedavg", 84.0, 0.3, 3)]).assign(dataset="cifar10"),
        ]
    )
    assert best_method(rows, CLAIM)["verdict"] == CONTRADICTED
    assert best_method(rows, CLAIM | {"datasets": ["fmnist"]})["verdict"] == SUPPORTED


def test_trend_over_a_tables_methods_reads_one_metric_and_leaves_out_a_diverged_point():
    t4 = table(
        [
            ("1-label", "eps1", 58.0, 1.0, 3),
            ("1-label", "eps50", 75.0, 1.0, 3),
            ("1-label", "epsinf", math.nan, math.nan, 0),
        ]
    )
    other_metric = table([("1-label", "epsinf", 99.0, 0.1, 3)]).assign(metric="pooled_acc")  # not this metric
    claim = {"x": "epsilon", "metric": "local_acc_mean", "decreasing": False}
    claim["x_values"] = {"eps1": 1, "eps50": 50, "epsinf": float("inf"), "other": 2}
    rows = pd.concat([t4, other_metric, table([("1-label", "other", 70.0, 1.0, 3)]).assign(metric="pooled_acc")])
    out = trend(rows, claim)
    assert out["verdict"] == SUPPORTED and out["evidence"].count("(p=") == 1  # one group, from ε0 = 1 to 50
    assert out["evidence"].startswith("fmnist/1-label: local_acc_mean at epsilon=1 58.00 vs epsilon=50 75.00 (p=")
    one_seed = trend(table([("1-label", "eps1", 58.0, 1.0, 3), ("1-label", "eps50", 75.0, math.nan, 1)]), claim)
    assert one_seed["verdict"] == INCONCLUSIVE and one_seed["evidence"].endswith("(no test: fewer than 2 seeds)")


def test_trend_defaults_to_decreasing_and_a_figure_needs_no_diverged_column():
    fig = pd.DataFrame([dict(dataset="d", x=x, seed=s, m=10.0 - x + 0.1 * s) for x in (1, 2) for s in range(3)])
    out = trend(fig, {"x": "x", "metric": "m"})
    assert out["verdict"] == SUPPORTED and out["evidence"].startswith("d: m at x=1 9.10 vs x=2 8.10 (p=")
    rising = fig.assign(m=10.0 + fig.x * 0.5 + 0.01 * fig.seed)  # +0.5: not +1 (a trend has no margin)
    assert trend(rising, {"x": "x", "metric": "m", "decreasing": False})["verdict"] == SUPPORTED


def test_a_diverged_seed_is_left_out_even_where_its_row_holds_a_number():
    fig = pd.DataFrame(
        [dict(dataset="d", x=x, seed=s, m=10.0 - x + 0.1 * s, diverged=False) for x in (1, 2) for s in range(3)]
        + [dict(dataset="d", x=2, seed=3, m=50.0, diverged=True)]
    )
    assert trend(fig, {"x": "x", "metric": "m"})["verdict"] == SUPPORTED


def test_small_loss_with_no_spread_is_decided_by_the_means():
    from fed.reporting.claims import small_loss

    fig = pd.DataFrame(
        [dict(dataset="d", x=x, seed=s, m=70.0 - 0.5 * x, diverged=False) for x in (0, 3) for s in range(3)]
    )
    assert small_loss(fig, {"x": "x", "metric": "m", "margin": 2.0})["verdict"] == SUPPORTED  # −1.5 pp, no spread


def test_gap_trend_compares_the_smallest_with_the_largest_of_three_x_and_skips_what_it_cannot_read():
    from fed.reporting.claims import gap_trend

    def rows(dataset, points):
        return [
            dict(dataset=dataset, x=x, line=line, seed=s, m=v + 0.1 * s, diverged=False)
            for x, line, v in points
            for s in range(3)
        ]

    one_x = rows("a", [(0.1, "feddpms", 70.0), (0.1, "fedavg", 60.0)])
    no_candidate_at_the_end = rows("b", [(0.1, "feddpms", 70.0), (0.1, "fedavg", 60.0), (0.5, "fedavg", 60.0)])
    three = rows(
        "c",
        [(0.1, "feddpms", 70.0), (0.1, "fedavg", 60.0), (0.3, "feddpms", 70.0), (0.3, "fedavg", 69.0)]
        + [(0.5, "feddpms", 80.0), (0.5, "fedavg", 70.0)],
    )  # the gap: 10 at 0.1, 1 at 0.3, 10 at 0.5: unchanged from end to end
    out = gap_trend(pd.DataFrame(one_x + no_candidate_at_the_end + three), {"metric": "m", "methods": ["feddpms"]})
    assert out["verdict"] == INCONCLUSIVE
    assert out["evidence"].startswith("c: gap to the best other method +10.00 at x=0.1 vs +10.00 at x=0.5 (p=")


def test_correlation_reads_three_rows_two_values_each_and_every_dataset():
    from fed.reporting.claims import correlation

    claim = {"x": "x", "metric": "m"}
    flat = pd.DataFrame({"dataset": "a", "x": [1.0, 2, 3, 4], "m": 5.0})  # nothing to rank: skipped
    three = pd.DataFrame({"dataset": "b", "x": [1.0, 2, 3], "m": [1.0, 2, 3]})
    ties = pd.DataFrame({"dataset": "c", "x": [1.0, 1, 2, 2], "m": [1.0, 1, 2, 2]})
    out = correlation(pd.concat([flat, three, ties]), claim)
    assert "a:" not in out["evidence"] and "b: Spearman ρ(x, m) = 1.00 over 3 rows" in out["evidence"]
    assert "c: Spearman ρ(x, m) = 1.00 over 4 rows" in out["evidence"]
    # contradicted by a one-sided test downwards: ρ = −0.77 over 6 rows, p = 0.036 one-sided (0.072 two-sided)
    down = pd.DataFrame({"dataset": "d", "x": [1.0, 2, 3, 4, 5, 6], "m": [4.0, 5, 6, 3, 2, 1]})
    assert correlation(down, claim)["verdict"] == CONTRADICTED


def test_margin_count_by_hand():
    """flea 43 ± 1 against (1 + 5 %) × fedavg's 40 ± 1 = 42 ± 1.05 (three seeds a side): Welch's one-sided p; the
    count needs ⌈fraction · cells⌉ significant cells, and is contradicted once too few cells can still reach it."""
    from scipy import stats

    claim = {"metric": "local_acc_mean", "methods": ["flea"], "margin": 0.05, "fraction": 0.5}
    one = table([("p0", "fedavg", 40.0, 1.0, 3), ("p0", "flea", 43.0, 1.0, 3)])
    p = stats.ttest_ind_from_stats(43, 1, 3, 42, 1.05, 3, equal_var=False, alternative="greater").pvalue
    out = margin_count(one, claim)
    assert out["evidence"] == (
        f"0 of 1 cells significantly above +5% (needed: 1); 0 significantly below; fmnist/p0: flea +7.5% over fedavg "
        f"(p={p:.3g})"
    )

    def cells(*gains):
        rows = []
        for i, g in enumerate(gains):
            rows += [(f"p{i}", "fedavg", 40.0, 0.2, 5), (f"p{i}", "flea", 40.0 * (1 + g), 0.2, 5)]
        return table(rows)

    assert margin_count(cells(0.10, 0.0), claim)["verdict"] == SUPPORTED  # 1 of 2 reaches a half exactly
    assert margin_count(cells(0.05, 0.0), claim)["verdict"] == INCONCLUSIVE  # 1 cell below: 1 can still reach it
    assert margin_count(cells(0.0, 0.0), claim)["verdict"] == CONTRADICTED
    assert margin_count(cells(0.10), claim | {"methods": ["nobody"]}) == {"verdict": NOT_RUN, "evidence": ""}


def test_claims_table_rows_and_labels():
    one = table([("uni", "fedzdac", 86.0, 0.3, 3), ("uni", "fedavg", 84.0, 0.3, 3)])
    claims = {"best": {"kind": "best_method", "source": "t1", "statement": "s", **CLAIM}}
    out = claims_table(claims, {"t1": one}, {})
    assert list(out.columns) == ["claim", "statement", "test", "verdict", "evidence", "setting"]
    assert out.claim[0] == "best" and out.statement[0] == "s" and out.test[0].startswith("best candidate vs best other")
    assert out.evidence[0].startswith("fmnist/uni: fedzdac 86.00 vs fedavg 84.00 (p=")  # one source: not named
    two = claims_table(
        {"best": claims["best"] | {"source": ["t1", "t2"]}}, {"t1": one, "t2": one}, {"t1": "a", "t2": "b"}
    )
    assert two.setting[0] == "not comparable (a; b)"
    assert two.evidence[0].startswith("fmnist/uni (t1): fedzdac 86.00 vs fedavg 84.00 (p=")
    assert "; fmnist/uni (t2): fedzdac" in two.evidence[0]


def test_pooled_sources_make_one_cell_of_a_dataset_and_partition_across_tables():
    """FedDPMS at β = 0.1: the candidate in one table, FedProx in another, FedAvg in both. Apart, each table is its own
    cell (no rival for the candidate in the second); pooled, FedProx is the rival."""
    first = table([("dir0.1", "fedzdac", 85.8, 0.3, 3), ("dir0.1", "fedavg", 84.7, 0.3, 3)])
    second = table([("dir0.1", "fedavg", 84.7, 0.3, 3), ("dir0.1", "fedprox", 86.9, 0.3, 3)])
    claim = {"kind": "best_method", "source": ["a", "b"], "statement": "s", **CLAIM}
    apart = claims_table({"c": claim}, {"a": first, "b": second}, {})
    assert apart.verdict[0] == SUPPORTED and apart.evidence[0].startswith("fmnist/dir0.1 (a): fedzdac 85.80 vs fedavg")
    pooled = claims_table({"c": claim | {"pool_sources": True}}, {"a": first, "b": second}, {})
    assert pooled.verdict[0] == CONTRADICTED
    assert pooled.evidence[0].startswith("fmnist/dir0.1: fedzdac 85.80 vs fedprox 86.90 (p=")
    single = claims_table({"c": claim | {"pool_sources": True, "source": "a"}}, {"a": first}, {})  # one table: as is
    assert single.evidence[0] == claims_table({"c": claim | {"source": "a"}}, {"a": first}, {}).evidence[0]


def test_margin_count_counts_a_cell_of_one_seed_and_skips_one_whose_rival_diverged():
    rows = table(
        [
            ("p0", "fedavg", math.nan, math.nan, 0),
            ("p0", "flea", 44.0, 0.2, 5),
            ("p1", "fedavg", 40.0, math.nan, 1),
            ("p1", "flea", 44.0, math.nan, 1),
            ("p2", "fedavg", 40.0, 0.2, 5),
            ("p2", "flea", 44.0, 0.2, 5),
        ]
    )
    out = margin_count(rows, {"metric": "local_acc_mean", "methods": ["flea"], "margin": 0.05, "fraction": 0.5})
    assert out["verdict"] == SUPPORTED and out["evidence"].startswith("1 of 2 cells significantly above +5%")
    assert "fmnist/p1: flea +10.0% over fedavg (no test: fewer than 2 seeds)" in out["evidence"]
    assert "fmnist/p0" not in out["evidence"]


def test_evidence_follows_the_inputs_order_in_every_kind():
    """Datasets (and a table's partitions) are reported in the order the table or figure gives them, not sorted."""
    from fed.reporting.claims import correlation, gap_trend

    t4 = pd.concat([table([(p, "eps1", 58.0, 1.0, 3), (p, "eps50", 75.0, 1.0, 3)]) for p in ("zeta", "alpha")])
    ends = trend(t4, {"x": "e", "metric": "local_acc_mean", "decreasing": False, "x_values": {"eps1": 1, "eps50": 50}})
    assert ends["evidence"].index("fmnist/zeta") < ends["evidence"].index("fmnist/alpha")
    fig = pd.DataFrame(
        [
            dict(dataset=d, x=x, seed=s, m=10.0 - x + 0.1 * s, diverged=False)
            for d in ("zeta", "alpha")
            for x in (1, 2)
            for s in range(3)
        ]
    )
    ends = trend(fig, {"x": "x", "metric": "m"})["evidence"]
    assert ends.index("zeta:") < ends.index("alpha:")
    lines = pd.DataFrame(
        [dict(dataset=d, x=x, line=ln, seed=s, m=v + s, diverged=False)
         for d in ("zeta", "alpha") for x in (1, 2) for ln, v in (("a", 5.0 * x), ("b", 1.0)) for s in range(3)]
    )  # fmt: skip
    gaps = gap_trend(lines, {"metric": "m", "methods": ["a"]})["evidence"]
    assert gaps.index("zeta:") < gaps.index("alpha:")
    ranked = pd.DataFrame({"dataset": ["zeta"] * 4 + ["alpha"] * 4, "x": [1.0, 2, 3, 4] * 2, "m": [1.0, 3, 2, 4] * 2})
    ranks = correlation(ranked, {"x": "x", "metric": "m"})["evidence"]
    assert ranks.index("zeta:") < ranks.index("alpha:")


def test_a_cell_s_own_metric_is_told_apart_by_dataset_partition_and_method():
    """The repeated-metric rule groups a row by every column that names its cell: two partitions (or methods, or
    datasets) of one figure whose values differ are still each a cell's own value, read once a seed."""
    from fed.reporting.claims import small_loss

    acc = {(0, 0): 70.1, (0, 1): 69.6, (0, 2): 70.3, (3, 0): 69.0, (3, 1): 67.9, (3, 2): 68.6}
    claim = {"x": "x", "metric": "global_acc", "margin": 2.0}
    for column, values in (("partition", ("a", "b")), ("method", ("m", "n")), ("dataset", ("fmnist", "cifar10"))):
        rows = [
            {"dataset": "fmnist", "round": r, "x": x, "seed": s, "global_acc": a + i, column: v}
            for r in (1, 10)
            for (x, s), a in acc.items()
            for i, v in enumerate(values)
        ]
        out = small_loss(pd.DataFrame(rows).assign(diverged=False), claim)
        assert "round" not in out["evidence"], column
