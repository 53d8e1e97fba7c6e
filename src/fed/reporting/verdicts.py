"""Verdicts: did we reproduce a paper's number? Computed from the numbers, never assumed.

Per cell, in this order of precedence:
- ``not yet implemented`` / ``no runs``;
- ``diverged (k of n seeds)`` when every seed diverged (when only some did, the verdict is on the others and the
  ``diverged_seeds`` column counts them);
- ``no paper value``: the paper does not report this cell (e.g. our generated smoke data);
- ``not comparable (<reason>)``: the preset departs from the paper's protocol (fewer rounds, a smaller budget) —
  the difference is still shown, but it says nothing about reproduction;
- ``reproduced`` when |ours − paper| ≤ max(floor, min(k·√(σ_paper² + σ_ours²), ceiling·|paper|)) — by default
  floor = 2 (percentage points for accuracies, the metric's own unit for variances), k = 2 and ceiling = 0.1; a
  missing σ counts as 0. The ceiling keeps a wide seed spread from passing any gap: with 3 seeds 6 pp apart the
  spread term alone allows 12 pp, while the ceiling allows at most a tenth of the paper's value (≤ 10 pp for an
  accuracy), so no cell 10 pp from the paper reads reproduced;
- otherwise ``above paper`` or ``below paper``.

A table whose cells ran on more than one kind of machine (``fed.provenance.kind``: CPU kernel set and model, or
GPU) raises the floor to ``cross_machine`` (default 2.8 pp: the largest change of the 72 cells of the head-to-head's
3 h overlay moved to another CPU, docs/results/headtohead.md, "The same cells on another CPU"). It keeps the rounding
those cells showed out of a verdict, not every cell's: a later check moved one SCAFFOLD cell 8.6 pp (same page), so
an unstable method's verdict near the floor is read over its seeds.

A paper value read off a figure (``fed.reporting.digitise``) carries its reading uncertainty: it widens the
tolerance by that much, and the verdict says "read from a figure".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

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
    ceiling: float | None = 0.1  # of |paper|; None: no ceiling
    cross_machine: float = 2.8  # the floor of a table that mixes machines

    def across_machines(self) -> Tolerance:
        """The tolerance of a table whose cells ran on several kinds of machine."""
        return replace(self, floor=max(self.floor, self.cross_machine))

    def of(self, paper: float, paper_std: float, ours_std: float) -> float:
        sp, so = (0.0 if not math.isfinite(s) else s for s in (paper_std, ours_std))
        spread = self.k * math.sqrt(sp**2 + so**2)
        if self.ceiling is not None:
            spread = min(spread, self.ceiling * abs(paper))
        return max(self.floor, spread)

    def allowed(self, paper: float, paper_std: float, ours_std: float, read_uncertainty: float = math.nan) -> float:
        """The gap a cell may have and read reproduced: ``of``, widened by a figure's reading uncertainty."""
        return self.of(paper, paper_std, ours_std) + (read_uncertainty if math.isfinite(read_uncertainty) else 0.0)

    def describe(self) -> str:
        spread = f"{self.k:g}·√(σ_paper² + σ_ours²)"
        if self.ceiling is not None:
            spread = f"min({spread}, {self.ceiling:g}·|paper|)"
        return f"|ours − paper| ≤ max({self.floor:g}, {spread})"


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
    read_uncertainty: float = math.nan,
) -> str:
    if seeds == 0:
        return f"{DIVERGED} ({diverged} of {diverged} seeds)" if diverged else NO_RUNS
    if not math.isfinite(paper):
        return NO_PAPER
    if not_comparable:
        return f"{NOT_COMPARABLE} ({not_comparable})"
    delta = ours_mean - paper
    allowed = tolerance.allowed(paper, paper_std, ours_std, read_uncertainty)
    outcome = REPRODUCED if abs(delta) <= allowed else ABOVE if delta > 0 else BELOW
    return f"{outcome} (read from a figure, ±{read_uncertainty:g})" if math.isfinite(read_uncertainty) else outcome


def category(v: str) -> str:
    """The verdict without its parenthesised detail (for colours and counts)."""
    return v.split(" (")[0]
