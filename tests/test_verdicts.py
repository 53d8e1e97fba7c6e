"""The verdict rule on constructed cases: a cell far from the paper can never read "reproduced"."""

import math

import pandas as pd
import pytest

from fed.reporting.tables import build_table, paper_layout
from fed.reporting.verdicts import Tolerance, category, verdict

NAN = math.nan


@pytest.mark.parametrize(
    "ours,ours_std,paper,paper_std,expected",
    [
        (25.8, 0.5, 83.1, 0.4, "below paper"),  # q-FFL in the quick run: -57 pp
        (73.1, 0.1, 83.1, 0.1, "below paper"),  # 10 pp with tight stds
        (93.1, 0.1, 83.1, 0.1, "above paper"),
        (81.2, 0.3, 83.1, 0.2, "reproduced"),  # within the 2 pp floor
        (79.0, 1.5, 83.1, 1.5, "reproduced"),  # 4.1 pp <= 2 * sqrt(1.5^2 + 1.5^2) = 4.24
        (78.0, 1.5, 83.1, 1.5, "below paper"),  # 5.1 pp > 4.24
        (80.0, NAN, 83.1, NAN, "below paper"),  # one seed, no paper std: the floor alone
        (6.70, 1.0, 6.70, NAN, "reproduced"),  # a variance, in its own unit
        # a wide seed spread passes no gap: 2·√(0.43² + 5.95²) = 11.9 pp, capped at 10 % of 81.24 = 8.1 pp
        (70.85, 5.95, 81.24, 0.43, "below paper"),  # FMNIST multimodal q-FFL, Table 2: −10.4 pp
        (73.5, 5.95, 81.24, 0.43, "reproduced"),  # −7.7 pp: within the capped spread
        (314.6, 144.2, 135.0, 11.0, "above paper"),  # a variance 2.3× the paper's: cap 13.5, not 289
    ],
)
def test_verdict_rule(ours, ours_std, paper, paper_std, expected):
    assert verdict(ours, ours_std, 3, 0, paper, paper_std) == expected


def test_tolerance_by_hand():
    """The allowed gap, hand-computed: k·√(σ_paper² + σ_ours²) with σ = 3 and 4 is 2·5 = 10 (no ceiling); a missing σ
    counts as 0, not as 1 nor as a NaN that would leave the floor alone."""
    free = Tolerance(ceiling=None)
    assert free.of(50.0, 3.0, 4.0) == pytest.approx(10.0)
    assert free.of(50.0, NAN, 4.0) == pytest.approx(8.0) and free.of(50.0, 3.0, NAN) == pytest.approx(6.0)
    assert Tolerance().of(50.0, 3.0, 4.0) == pytest.approx(5.0)  # capped at 10 % of 50
    assert free.allowed(50.0, 3.0, 4.0, read_uncertainty=1.5) == pytest.approx(11.5)
    assert Tolerance().describe() == "|ours − paper| ≤ max(2, min(2·√(σ_paper² + σ_ours²), 0.1·|paper|))"
    assert free.describe() == "|ours − paper| ≤ max(2, 2·√(σ_paper² + σ_ours²))"


def test_a_gap_equal_to_the_tolerance_is_reproduced_and_a_small_one_past_it_is_above_or_below():
    assert verdict(52.0, NAN, 1, 0, 50.0, NAN) == "reproduced"  # |2| ≤ 2: the rule's ≤
    tight = Tolerance(floor=0.5)
    assert verdict(50.75, NAN, 1, 0, 50.0, NAN, tolerance=tight) == "above paper"  # 0.75 pp above: not "below"
    assert verdict(49.25, NAN, 1, 0, 50.0, NAN, tolerance=tight) == "below paper"


def test_category_drops_only_the_detail():
    assert category("above paper (read from a figure, ±1.5)") == "above paper"
    assert category("diverged (3 of 3 seeds)") == "diverged" and category("below paper") == "below paper"


def test_verdict_precedence():
    assert verdict(NAN, NAN, 0, 3, 83.1, 0.4) == "diverged (3 of 3 seeds)"
    assert verdict(NAN, NAN, 0, 0, 83.1, 0.4) == "no runs"
    assert verdict(50.0, 1.0, 3, 0, NAN, NAN) == "no paper value"
    reduced = verdict(83.0, 0.1, 3, 0, 83.1, 0.1, not_comparable="12 of 100 rounds")
    assert reduced == "not comparable (12 of 100 rounds)"  # even when the numbers happen to agree
    assert verdict(80.0, 0.0, 3, 0, 83.1, 0.0, tolerance=Tolerance(floor=5.0)) == "reproduced"
    assert verdict(70.85, 5.95, 3, 0, 81.24, 0.43, tolerance=Tolerance(ceiling=None)) == "reproduced"


@pytest.mark.parametrize("paper", [10.0, 50.0, 83.1, 100.0])
@pytest.mark.parametrize("ours_std", [0.0, 1.0, 5.0, 20.0])
def test_no_cell_10_pp_from_an_accuracy_reads_reproduced(paper, ours_std):
    for gap in (10.01, 15.0, 30.0):
        assert verdict(paper - gap, ours_std, 3, 0, paper, ours_std) != "reproduced"


def runs(values, metric="global_acc", method="qffl"):
    return pd.DataFrame(
        [
            dict(
                dataset="fmnist",
                partition="unimodal",
                method=method,
                seed=s,
                protocol="last",
                metric=metric,
                value=v,
                diverged=False,
            )
            for s, v in enumerate(values)
        ]
    )


PAPER = pd.DataFrame(
    [
        dict(
            table="Table 2",
            dataset="fmnist",
            partition="unimodal",
            method="qffl",
            metric="global_acc",
            value="83.10",
            std="0.40",
        )
    ]
)


def test_a_cell_57_points_below_the_paper_reads_below_never_reproduced():
    table = build_table(
        runs([25.0, 26.0, 26.4]),
        PAPER,
        "Table 2",
        ["fmnist"],
        ["unimodal"],
        {"qffl": "qffl"},
        ["global_acc"],
        "last",
        {"qffl"},
    )
    row = table.iloc[0]
    assert row.verdict == "below paper" and row.delta == pytest.approx(25.8 - 83.1)
    assert row.paper_value == 83.1 and row.paper_std == 0.4


def test_quick_config_cells_are_not_comparable_and_say_why():
    table = build_table(
        runs([83.0, 83.2]),
        PAPER,
        "Table 2",
        ["fmnist"],
        ["unimodal"],
        {"qffl": "qffl"},
        ["global_acc"],
        "last",
        {"qffl"},
        not_comparable="12 of 100 rounds",
    )
    assert table.iloc[0].verdict == "not comparable (12 of 100 rounds)"


def test_paper_layout_methods_as_rows_dataset_partition_metric_as_columns():
    both = pd.concat([runs([80.0, 82.0]), runs([70.0, 72.0], method="fedavg")])
    table = build_table(
        both,
        PAPER,
        "Table 2",
        ["fmnist"],
        ["unimodal"],
        {"fedavg": "fedavg", "qffl": "qffl"},
        ["global_acc"],
        "last",
        {"fedavg", "qffl"},
    )
    layout = paper_layout(table)
    assert list(layout.index) == ["fedavg", "qffl"]
    assert list(layout.columns) == [("fmnist", "unimodal", "global_acc")]
    assert layout.loc["qffl"].iloc[0] == "81.00 ± 1.41 (83.10 ± 0.40)"
    assert layout.loc["fedavg"].iloc[0] == "71.00 ± 1.41 (—)"
    assert layout.attrs["verdicts"].loc["qffl"].iloc[0] == "reproduced"


def test_paper_layout_says_when_a_mean_leaves_out_diverged_seeds():
    seeds = runs([80.0, 82.0, math.nan])
    seeds.loc[2, "diverged"] = True
    table = build_table(
        seeds, PAPER, "Table 2", ["fmnist"], ["unimodal"], {"qffl": "qffl"}, ["global_acc"], "last", {"qffl"}
    )
    layout = paper_layout(table)
    assert layout.loc["qffl"].iloc[0] == "81.00 ± 1.41 [1 of 3 seeds diverged] (83.10 ± 0.40)"
    assert layout.attrs["verdicts"].loc["qffl"].iloc[0] == "reproduced"  # the verdict is on the two that did not
