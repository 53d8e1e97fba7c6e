"""Membership inference scored alike for every artifact (fed.membership): hand-computed values."""

import math

import pytest
import torch

from fed.membership import attack, bootstrap_advantage, interval, leakage_interval, paired_advantage

T = torch.tensor


def test_paired_advantage_by_hand():
    one = torch.zeros(4, dtype=torch.long)
    # members .9, .7 against non-members .8, .1: pairs won 1 + 1 + 0 + 1 = 3 of 4 → AUC .75 → advantage .5
    assert paired_advantage(T([0.9, 0.8, 0.7, 0.1]), T([1, 0, 1, 0]).bool(), one) == pytest.approx(0.5)
    assert paired_advantage(T([1.0, 1.0, 0.0, 0.0]), T([1, 1, 0, 0]).bool(), one) == 1.0  # every pair won
    assert paired_advantage(T([0.0, 0.0, 1.0, 1.0]), T([1, 1, 0, 0]).bool(), one) == -1.0  # the roles matter
    assert paired_advantage(T([0.5, 0.5, 0.5, 0.5]), T([1, 0, 1, 0]).bool(), one) == 0.0  # ties: a coin
    assert math.isnan(paired_advantage(T([1.0]), T([1]).bool(), T([0])))  # no pair: no advantage, not 0


def test_pairs_are_only_formed_within_a_stratum():
    """Class A's records all sit near the artifacts and are mostly members; class B's far and mostly held out:
    pairs across classes reward the class, not membership."""
    score = T([10.0, 11.0, 12.0, 11.5, 1.0, 0.5, 1.5, 2.0])
    member = T([1, 1, 1, 0, 1, 0, 0, 0]).bool()
    strata = T([0, 0, 0, 0, 1, 1, 1, 1])
    # all pairs pooled: A's members beat all 3 of B's non-members and 1 of 3 beats 11.5; B's member beats .5 only:
    # (3·3 + 1) + 1 = 11 of 4·4 = 16 → 2·11/16 − 1 = .375
    assert paired_advantage(score, member, torch.zeros(8, dtype=torch.long)) == pytest.approx(0.375)
    # within: A: 12 > 11.5 only → 1 of 3; B: 1 > .5 only → 1 of 3; 2 of 6 → 2/6·2 − 1 = −1/3
    assert paired_advantage(score, member, strata) == pytest.approx(-1 / 3)


def test_strata_without_both_sides_are_left_out_and_counted():
    member = T([1, 1, 0, 1, 0, 0]).bool()
    strata = T([0, 0, 0, 1, 2, 2])  # stratum 1: a member only; stratum 2: held-out records only
    out = attack(T([5.0, 6.0, 1.0, 9.0, 0.0, 0.0]), member, strata, seed=0, resamples=50)
    assert out["attack_records"] == 3 and out["attack_strata_left_out"] == 2
    assert out["advantage"] == 1.0 and out["advantage_ci"] == [1.0, 1.0]  # every resample separates them
    none = attack(T([1.0, 2.0]), T([1, 1]).bool(), T([0, 0]), seed=0)
    assert none == {"attack_records": 0, "attack_strata_left_out": 1}  # nothing to test


def test_the_bootstrap_resamples_each_side_of_each_stratum():
    # one member (3) against non-members 1 and 5 in stratum 0: resamples of the non-members give (1,1) → 1,
    # (5,5) → −1, mixed → 0; stratum 1 (2 beats 0) is won in every resample
    score, member, strata = T([3.0, 1.0, 5.0, 2.0, 0.0]), T([1, 0, 0, 1, 0]).bool(), T([0, 0, 0, 1, 1])
    boot = bootstrap_advantage(score, member, strata, seed=0, resamples=400)
    # pairs: 2 in stratum 0, 1 in stratum 1 → advantage 2·(w + 1)/3 − 1 with w ∈ {0, 1, 2}
    assert {round(v, 6) for v in boot.tolist()} == {round(-1 / 3, 6), round(1 / 3, 6), 1.0}
    assert torch.equal(boot, bootstrap_advantage(score, member, strata, seed=0, resamples=400))
    assert paired_advantage(score, member, strata) == pytest.approx(1 / 3)


def test_intervals_by_hand():
    assert interval(torch.arange(101.0)) == pytest.approx([2.5, 97.5])
    assert interval(torch.arange(101.0), level=0.5) == pytest.approx([25.0, 75.0])
    # every record a hit at chance .5: leakage 1 in every resample
    assert leakage_interval(T([1.0, 1.0, 1.0]), T([0.5, 0.5, 0.5]), seed=0) == (1.0, [1.0, 1.0])
    # hits (1, 0) at chance (.5, .5): score 0; resamples give (1,1) → 1, (0,0) → −1, mixed → 0
    score, (lo, hi) = leakage_interval(T([1.0, 0.0]), T([0.5, 0.5]), seed=0)
    assert score == 0.0 and lo == -1.0 and hi == 1.0
