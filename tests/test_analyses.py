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
    assert g.loc["A", "primary: 95 % interval; Holm p"] == f"{3.5 - half:+.1f} to {3.5 + half:+.1f}; {p:.2g}"
    assert g.loc["A", "pooled t"] == f"better ({row(t, 'pooled_t', 'A')['p_holm']:.2g})"
    assert g.loc["A", "Friedman–Nemenyi (CD 1.35 over 6 blocks)"] == "— (+1.2)"
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
