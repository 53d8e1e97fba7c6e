"""The head-to-head's analyses (fed.reporting.analyses, docs/headtohead-protocol.md section 5) against values worked
out by hand on 2 regimes × 3 seeds × 3 methods."""

import math

import pandas as pd
import pytest

from fed.reporting.analyses import analyse, differences, survivors

A = {"r1": [11, 12, 13], "r2": [14, 15, 16]}  # d = 1 … 6 against a baseline of 10 everywhere
B = {"r1": [10.5, 9, 9.8], "r2": [9.5, 9.1, 8]}


def values(higher: bool = True) -> pd.DataFrame:
    rows = []
    for method, by_regime in (("base", {"r1": [10] * 3, "r2": [10] * 3}), ("A", A), ("B", B)):
        for regime, xs in by_regime.items():
            rows += [{"method": method, "regime": regime, "seed": s, "value": x if higher else -x}
                     for s, x in enumerate(xs)]  # fmt: skip
    return pd.DataFrame(rows)


def row(table, analysis, method):
    return table[(table["analysis"] == analysis) & (table["method"] == method)].iloc[0]


def test_every_analysis_by_hand():
    t = analyse(values(), "base")
    primary = row(t, "primary", "A")  # regime means 2 and 5: δ = 3.5, sd 2.1213, t = 3.5 / 1.5 on 1 df
    assert primary["diff"] == pytest.approx(3.5) and primary["n"] == 2
    assert primary["statistic"] == pytest.approx(7 / 3)
    assert primary["p"] == pytest.approx(1 - 2 * math.atan(7 / 3) / math.pi)  # Student's t on 1 df: Cauchy
    assert primary["high"] - 3.5 == pytest.approx(12.706205 * 1.5, rel=1e-6)  # t_.975,1 · sd/√R
    pooled = row(t, "pooled_t", "A")  # d = 1…6: mean 3.5, sd √3.5, t = 3.5 √6 / √3.5
    assert pooled["statistic"] == pytest.approx(3.5 * math.sqrt(6) / math.sqrt(3.5)) and pooled["n"] == 6
    wilcoxon = row(t, "wilcoxon", "A")  # all six positive: W = 0, exact two-sided p = 2 / 2⁶
    assert wilcoxon["statistic"] == 0 and wilcoxon["p"] == pytest.approx(2 / 64)
    regime = row(t, "regime:r1", "A")  # 1, 2, 3: t = 2 / (1/√3)
    assert regime["statistic"] == pytest.approx(2 * math.sqrt(3))
    # Friedman: rank sums A 6, base 13, B 17 over 6 blocks: χ² = 12/(6·3·4)·494 − 72 = 10.333, p = e^(−χ²/2)
    friedman = row(t, "friedman", "A")
    assert friedman["p"] == pytest.approx(math.exp(-(12 / 72 * 494 - 72) / 2))
    assert friedman["diff"] == pytest.approx(13 / 6 - 1)  # the baseline's mean rank − A's
    assert friedman["statistic"] == pytest.approx(3.314493 / math.sqrt(2) * math.sqrt(12 / 36), rel=1e-5)  # CD
    assert not friedman["significant"]  # 1.17 ranks < CD 1.35
    assert row(t, "friedman", "B")["diff"] == pytest.approx(13 / 6 - 17 / 6)


def test_holm_runs_within_each_family_and_survivors_need_every_analysis():
    t = analyse(values(), "base")
    pa, pb = row(t, "pooled_t", "A")["p"], row(t, "pooled_t", "B")["p"]
    first = min(1, 2 * min(pa, pb))  # Holm over two: 2·p₍₁₎, then max(that, p₍₂₎)
    holm = {min(pa, pb): first, max(pa, pb): max(first, max(pa, pb))}
    assert row(t, "pooled_t", "A")["p_holm"] == pytest.approx(holm[pa])
    assert row(t, "pooled_t", "B")["p_holm"] == pytest.approx(holm[pb])
    assert set(t["analysis"]) == {"primary", "pooled_t", "wilcoxon", "friedman", "regime:r1", "regime:r2"}
    s = survivors(t).set_index("method")
    assert row(t, "pooled_t", "A")["significant"] and not row(t, "primary", "A")["significant"]
    assert not s.loc["A", "survives"]  # significant pooled, not under the regime-level primary analysis


def test_lower_is_better_metrics_count_a_decrease_as_better():
    d = differences(values(higher=False), "base", higher_is_better=False)
    assert d[d["method"] == "A"]["d"].tolist() == [1, 2, 3, 4, 5, 6]
    assert analyse(values(higher=False), "base", False).equals(analyse(values(), "base"))


def test_fed_analyse_prints_what_the_rule_writes_contrasts_included(tmp_path):
    """``fed analyse`` on the protocol's shared board, from committed cells: per metric asked for, the ``analyses``
    rule's glance (``board_analyses``), then the contrast (p_feddata against p_fedavg_matched); ``-o`` is the rule's
    CSV; a metric the table does not have is a clear error."""
    import subprocess
    import sys

    from conftest import REPO

    from fed.grid import Grid

    configs = [str(REPO / f"config/{n}.yaml") for n in ("headtohead", "headtohead_cpu", "headtohead_protocol")]
    run = [sys.executable, "-m", "fed", "analyse", *configs, "--table", "headtohead_protocol_shared"]
    proc = subprocess.run([*run, "--metric", "global_acc", "-o", str(tmp_path / "a.csv")],
                          capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    blocks = proc.stdout.strip().split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == ["global_acc", "global_acc: p_feddata against p_fedavg_matched"]
    assert len(blocks[0].splitlines()) == 2 + 12 and "p_fedavg " not in blocks[0]  # title, header, 12 methods
    spec = Grid.from_files(configs, REPO).config["tables"]["headtohead_protocol_shared"]
    assert "p_feddata +11.11 " in " ".join(blocks[1].split()) + " "  # the contrast's δ, committed cells
    every = pd.read_csv(tmp_path / "a.csv")
    assert set(every["metric"]) == {"global_acc"} and set(every["against"]) == {spec["baseline"], "p_fedavg_matched"}
    wrong = subprocess.run([*run, "--metric", "accuracy"], capture_output=True, text=True, cwd=REPO)
    assert wrong.returncode != 0 and "has no metric ['accuracy']" in wrong.stderr and "Traceback" not in wrong.stderr


def test_fed_analyse_names_the_cells_a_board_still_misses(tmp_path):
    """A board with cells not yet run (the protocol's, with a seed nobody runs): a clear error that counts the missing
    cells and names one, not a FileNotFoundError from deep in the tables (run in a directory without results/)."""
    import subprocess
    import sys

    from conftest import REPO

    (tmp_path / "seed99.yaml").write_text("tables:\n  headtohead_protocol_shared:\n    seeds: [0, 99]\n")
    names = ("headtohead", "headtohead_cpu", "headtohead_protocol")
    configs = [str(REPO / f"config/{name}.yaml") for name in names] + [str(tmp_path / "seed99.yaml")]
    proc = subprocess.run([sys.executable, "-m", "fed", "analyse", *configs, "--table", "headtohead_protocol_shared"],
                          capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "cells are neither committed (current) nor under results/, e.g. results/runs/h2h_protocol/" in proc.stderr
    assert "/seed99/metrics.json" in proc.stderr or "/seed0/metrics.json" in proc.stderr


def test_the_glance_reads_each_analysis_and_keeps_a_method_with_no_value():
    """The glance row of A: δ 3.5 with the primary interval 3.5 ± 12.7062·1.5 and its Holm p; better under the pooled
    t (Holm over A and B), not under Friedman (1.17 ranks < CD 1.35), so not 'all four'; a method whose every run
    diverged (C: no value) gets a row that says so, after those analysed."""
    from fed.reporting.analyses import glance

    t = analyse(values(), "base")
    g = glance(t, ["A", "B", "C"]).set_index("method")
    assert list(g.index) == ["A", "B", "C"]  # by δ: A 3.5, B −0.85; then C
    half = 12.706205 * 1.5
    p = row(t, "primary", "A")["p_holm"]
    assert g.loc["A", "δ"] == "+3.50"
    assert g.loc["A", "primary: 95 % interval; Holm p"] == f"{3.5 - half:+.2f} to {3.5 + half:+.2f}; {p:.2g}"
    assert g.loc["A", "pooled t"] == f"better ({row(t, 'pooled_t', 'A')['p_holm']:.2g})"
    assert g.loc["A", "Friedman–Nemenyi (CD 1.35 over 6 blocks)"] == "— (+1.17)"
    assert g.loc["A", "all four"] == "—"
    # per regime: r2's 4, 5, 6 give t = 5√3 (p 0.0131 on 2 df), 0.026 after Holm over A and B; r1's 2√3 does not
    assert g.loc["A", "regimes (t over seeds, Holm)"] == "r2 +" and g.loc["B", "regimes (t over seeds, Holm)"] == "—"
    assert g.loc["C", "δ"] == "no value (every run diverged)" and g.loc["C", "pooled t"] == ""


def test_a_contrast_is_its_own_family_of_one_against_its_own_method():
    """``contrasts: {A: B}``: A tested against B (not the baseline), alone, so Holm leaves its p as it is. By hand:
    A − B = 0.5, 3, 3.2 (r1) and 4.5, 5.9, 8 (r2); regime means 2.2333 and 6.1333, δ = 4.1833, t = δ / (3.9 / 2)."""
    from fed.reporting.analyses import board_analyses

    rows = values().rename(columns={"regime": "partition"})
    runs = rows.assign(dataset="d", protocol="last", metric="global_acc", diverged=False, machine="m")
    table = {"baseline": "base", "methods": ["base", "A", "B"], "metrics": ["global_acc"], "contrasts": {"A": "B"}}
    every, glances = board_analyses(runs, table, "last")
    assert [title for title, _ in glances] == ["global_acc", "global_acc: A against B"]
    assert glances[1][1].iloc[0]["Friedman–Nemenyi (CD 0.80 over 6 blocks)"] == "n/a"  # two methods: no Friedman
    c = every[(every["against"] == "B") & (every["analysis"] == "primary")]
    assert list(c["method"]) == ["A"] and c["diff"].iloc[0] == pytest.approx(4.18333, rel=1e-5)
    t = 4.18333 / 1.95
    assert c["statistic"].iloc[0] == pytest.approx(t, rel=1e-5)
    assert c["p_holm"].iloc[0] == c["p"].iloc[0] == pytest.approx(1 - 2 * math.atan(t) / math.pi, rel=1e-5)
    assert row(every[every["against"] == "base"], "primary", "A")["diff"] == pytest.approx(3.5)  # the board's own


def test_a_board_with_no_complete_block_is_analysed_and_says_so():
    """A and B ran on different seeds (the others diverged): no (regime, seed) block holds every method, so
    Friedman has no ranks and Nemenyi no CD, and the glance says so instead of failing."""
    from fed.reporting.analyses import glance

    rows = [dict(method="base", regime="r", seed=s, value=10.0 + s) for s in range(4)]
    rows += [dict(method="A", regime="r", seed=s, value=12.0 + s) for s in (0, 1)]
    rows += [dict(method="B", regime="r", seed=s, value=9.0 + s) for s in (2, 3)]
    t = analyse(pd.DataFrame(rows), "base")
    friedman = row(t, "friedman", "A")
    assert friedman["n"] == 0 and math.isnan(friedman["statistic"]) and not friedman["significant"]
    g = glance(t, ["A", "B"]).set_index("method")
    assert g.loc["A", "Friedman–Nemenyi (no complete block)"] == "n/a"
    assert g.loc["A", "pooled t"].startswith("better (") and g.loc["B", "pooled t"].startswith("worse (")


def test_small_cases_by_hand():
    """One regime: the primary analysis has its δ and n but no test; two pairs are enough for Wilcoxon's test (exact,
    both positive: p = 2/2²), one pair or no nonzero difference are not; two complete blocks are enough for
    Friedman's, whose p is its own Holm p (one test a method); the columns come in the documented order."""
    from fed.reporting.analyses import COLUMNS, regime_means_t, signed_rank

    one = regime_means_t(pd.DataFrame({"regime": ["r", "r"], "d": [1.0, 2.0]}))
    assert one["diff"] == 1.5 and one["n"] == 1 and math.isnan(one["p"])
    assert signed_rank(pd.DataFrame({"d": [1.0, 2.0]}))["p"] == pytest.approx(0.5)
    assert signed_rank(pd.DataFrame({"d": [1.0, 1.0]}))["p"] == pytest.approx(0.5)
    single = signed_rank(pd.DataFrame({"d": [3.0]}))
    assert single["diff"] == 3.0 and single["n"] == 1 and math.isnan(single["p"])
    assert math.isnan(signed_rank(pd.DataFrame({"d": [0.0, 0.0, 0.0]}))["p"])
    two_blocks = values()[values()["seed"] == 0]
    t = analyse(two_blocks, "base")
    assert list(t.columns) == COLUMNS
    # ranks: A 1 and 1, B 2 and 3, base 3 and 2: χ² = 12/(2·3·4)·(2² + 5² + 5²) − 3·2·4 = 3, p = e^(−3/2)
    friedman = row(t, "friedman", "A")
    assert friedman["n"] == 2 and friedman["p"] == pytest.approx(math.exp(-1.5)) and friedman["p_holm"] == friedman["p"]
    primary = row(analyse(two_blocks[two_blocks["regime"] == "r1"], "base"), "primary", "A")
    assert primary["diff"] == 1 and primary["n"] == 1 and math.isnan(primary["p_holm"])
    assert differences(values(), "base")["d"].tolist()[:6] == [1, 2, 3, 4, 5, 6]  # higher is better by default


def test_survivors_count_a_missing_analysis_as_not_significant():
    t = analyse(values(), "base")
    everything = t.assign(significant=True)  # as if every analysis found A better
    assert survivors(everything).set_index("method").loc["A", "survives"]
    assert not survivors(everything[everything["analysis"] != "friedman"]).set_index("method").loc["A", "survives"]


def test_the_glance_words_a_small_significant_gain_and_a_conclusion_that_holds_under_all_four():
    from fed.reporting.analyses import glance

    t = analyse(values(), "base")
    t.loc[t["method"] == "A", "significant"] = True
    t.loc[t["method"] == "A", "diff"] = 0.5  # a gain under 1
    g = glance(t, ["A", "B"]).set_index("method")
    assert g.loc["A", "pooled t"].startswith("better (") and g.loc["A", "all four"] == "better"
    lone = values()[(values()["seed"] == 0) & (values()["regime"] == "r1")]  # one pair: no test at all
    assert glance(analyse(lone, "base"), ["A"]).set_index("method").loc["A", "pooled t"] == "n/a"


def test_the_glance_keeps_every_method_with_no_value():
    from fed.reporting.analyses import glance

    g = glance(analyse(values(), "base"), ["A", "B", "C", "D"])
    assert list(g["method"]) == ["A", "B", "C", "D"] and set(g["δ"][2:]) == {"no value (every run diverged)"}


def test_board_values_name_regimes_by_dataset_when_a_board_has_several():
    from fed.reporting.analyses import board_values

    runs = values().rename(columns={"regime": "partition"})
    runs = runs.assign(dataset=["d1", "d2"] * (len(runs) // 2), protocol="last", metric="global_acc", diverged=False)
    assert set(board_values(runs, "global_acc", "last")["regime"]) == {"d1/r1", "d2/r1", "d1/r2", "d2/r2"}
    assert set(board_values(runs.assign(dataset="d"), "global_acc", "last")["regime"]) == {"r1", "r2"}


def test_a_board_of_a_lower_is_better_metric_against_the_default_baseline():
    """``client_acc_variance`` is lower-is-better (fed.metrics): a method whose variance falls is better; the CSV names
    the metric and the baseline, FedAvg where the table names none."""
    from fed.metrics import LOWER_IS_BETTER
    from fed.reporting.analyses import board_analyses

    metric = "client_acc_variance"
    assert metric in LOWER_IS_BETTER
    rows = values(higher=False).replace({"method": {"base": "fedavg"}}).rename(columns={"regime": "partition"})
    runs = rows.assign(dataset="d", protocol="last", metric=metric, diverged=False)
    board = {"methods": ["fedavg", "A", "B"], "metrics": [metric], "contrasts": {"A": "B"}}
    every, glances = board_analyses(runs, board, "last")
    assert set(every["metric"]) == {metric} and set(every["against"]) == {"fedavg", "B"}
    assert row(every[every["against"] == "fedavg"], "primary", "A")["diff"] == pytest.approx(3.5)
    assert row(every[every["against"] == "B"], "primary", "A")["diff"] == pytest.approx(4.18333, rel=1e-5)


def test_table_runs_counts_the_missing_cells_and_names_the_first(tmp_path, monkeypatch):
    """In process (``fed analyse``'s test runs it in a subprocess, where mutation testing cannot see): the count of
    cells neither committed nor run, and the first of them in the table's order."""
    from conftest import REPO

    from fed.grid import Grid
    from fed.reporting.analyses import table_runs

    (tmp_path / "seed99.yaml").write_text("tables:\n  headtohead_protocol_shared:\n    seeds: [0, 99]\n")
    names = ("headtohead", "headtohead_cpu", "headtohead_protocol")
    grid = Grid.from_files([str(REPO / f"config/{n}.yaml") for n in names] + [str(tmp_path / "seed99.yaml")], REPO)
    monkeypatch.chdir(tmp_path)
    cells = [grid.cell_path(**c) for c in grid.table_cells(grid.config["tables"]["headtohead_protocol_shared"])]
    missing = [str(p) for p in cells if "/seed99/" in str(p)]
    assert missing and len(missing) < len(cells)
    with pytest.raises(ValueError) as err:
        table_runs(grid, "headtohead_protocol_shared")
    assert f"{len(missing)} of its {len(cells)} cells are neither committed" in str(err.value)
    assert f"e.g. {missing[0]}: run them first" in str(err.value)


def test_a_contrast_whose_method_diverged_everywhere_and_a_board_of_one_regime_are_reported():
    """A contrast of a method with no value (every run diverged) reports it so instead of failing, and so does its
    glance; on a board of one regime the primary analysis has no interval and no test, and says so (no nan)."""
    from fed.reporting.analyses import board_analyses

    runs = values().rename(columns={"regime": "partition"}).replace({"method": {"base": "fedavg"}})
    runs = runs[runs["partition"] == "r1"].assign(dataset="d", protocol="last", metric="global_acc", diverged=False)
    runs.loc[runs["method"] == "A", "diverged"] = True
    board = {"methods": ["fedavg", "A", "B"], "metrics": ["global_acc"], "contrasts": {"A": "B"}}
    every, glances = board_analyses(runs, board, "last")
    assert [t for t, _ in glances] == ["global_acc", "global_acc: A against B"]
    main, contrast = (g.set_index("method") for _, g in glances)
    assert main.loc["A", "δ"] == contrast.loc["A", "δ"] == "no value (every run diverged)"
    assert main.loc["B", "primary: 95 % interval; Holm p"] == "n/a (one regime)"
    assert "nan" not in main.to_string() and set(every["against"]) == {"fedavg"}


def test_friedman_ranks_higher_values_first_by_default():
    from fed.reporting.analyses import friedman_nemenyi

    assert friedman_nemenyi(values(), "base").set_index("method").loc["A", "diff"] == pytest.approx(13 / 6 - 1)
