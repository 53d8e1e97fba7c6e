"""Claims are tested over seeds: supported, contradicted or inconclusive, never assumed."""

import pandas as pd

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
