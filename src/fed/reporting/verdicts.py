"""Verdicts: did we reproduce a paper's number? Computed from the numbers, never assumed.

Per cell, in this order of precedence:
- ``not yet implemented`` / ``no runs``;
- ``diverged (k of n seeds)`` when every seed diverged (when only some did, the verdict is on the others and the
  ``diverged_seeds`` column counts them);
- ``no paper value``: the paper does not report this cell (e.g. our generated smoke data);
- ``not comparable (<reason>)``: the preset departs from the paper's protocol (fewer rounds, a smaller budget) —
  the difference is still shown, but it says nothing about reproduction;
- ``reproduced`` when |ours − paper| ≤ max(floor, k·√(σ_paper² + σ_ours²)) — by default floor = 2 (percentage
  points for accuracies, the metric's own unit for variances) and k = 2; a missing σ counts as 0;
- otherwise ``above paper`` or ``below paper``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

REPRODUCED, ABOVE, BELOW = "reproduced", "above paper", "below paper"
NO_PAPER, NOT_COMPARABLE, DIVERGED = "no paper value", "not comparable", "diverged"
NOT_IMPLEMENTED, NO_RUNS = "not yet implemented", "no runs"
COLOURS = {
    REPRODUCED: "#c8e6c9",
    ABOVE: "#bbdefb",
    BELOW: "#ffcdd2",
    NOT_COMPARABLE: "#eeeeee",
    NO_PAPER: "#ffffff",
    DIVERGED: "#ffe0b2",
    NOT_IMPLEMENTED: "#f5f5f5",
    NO_RUNS: "#f5f5f5",
}


@dataclass(frozen=True)
class Tolerance:
    floor: float = 2.0
    k: float = 2.0

    def of(self, paper_std: float, ours_std: float) -> float:
        sp, so = (0.0 if not math.isfinite(s) else s for s in (paper_std, ours_std))
        return max(self.floor, self.k * math.sqrt(sp**2 + so**2))

    def describe(self) -> str:
        return f"|ours − paper| ≤ max({self.floor:g}, {self.k:g}·√(σ_paper² + σ_ours²))"


DEFAULT_TOLERANCE = Tolerance()


def verdict(
    ours_mean: float,
    ours_std: float,
    seeds: int,
    diverged: int,
    paper: float,
    paper_std: float,
    not_comparable: str = "",
    tolerance: Tolerance = DEFAULT_TOLERANCE,
) -> str:
    if seeds == 0:
        return f"{DIVERGED} ({diverged} of {diverged} seeds)" if diverged else NO_RUNS
    if not math.isfinite(paper):
        return NO_PAPER
    if not_comparable:
        return f"{NOT_COMPARABLE} ({not_comparable})"
    delta = ours_mean - paper
    if abs(delta) <= tolerance.of(paper_std, ours_std):
        return REPRODUCED
    return ABOVE if delta > 0 else BELOW


def category(v: str) -> str:
    """The verdict without its parenthesised detail (for colours and counts)."""
    return v.split(" (")[0]
