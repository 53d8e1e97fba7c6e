"""Membership inference, scored the same way for every artifact, with a per-class null and bootstrap intervals
(docs/headtohead-protocol.md, section 6).

An attack gives each record a score (higher: more likely a member, i.e. a record the artifact was made from); the
records are the owner's members and its held-out records (non-members). Records are grouped in strata (client ×
class) and compared only within their stratum: the attack is shown one member and one non-member **of the same
client and class** and names the one with the higher score (ties: a coin). Its **membership advantage** is
2·P(right) − 1 = 2·AUC − 1 over all such pairs (the stratified Mann–Whitney statistic): 0 without a signal, 1 where
every member outscores every non-member of its stratum, and a class whose records all sit nearer the artifacts
(class-conditional artifacts) gives nothing by itself — the null is per class. A stratum without members or without
non-members has no pair and is left out (counted).

Why pairs and not the best threshold's TPR − FPR: strata are small (2–3 held-out records per client and class in
the head-to-head), and one threshold needs scores made comparable across strata first. Ranked among a stratum's
held-out records, a model that had learnt nothing scored 0.33 (members and held-out records fall on different rank
grids); ranked among all its records, FedData's shared records — separated in every stratum — scored 0.91, not 1.
The paired statistic is 0 in expectation under the null and 1 under separation within every stratum.

Intervals: 95 % percentile bootstrap, members and non-members resampled with replacement within their stratum,
1,000 resamples from a seeded generator.
"""

from __future__ import annotations

import torch

RESAMPLES = 1000
LEVEL = 0.95
PAIRS_PER_CHUNK = 20_000_000  # comparisons held at once in the bootstrap


def _wins(m: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Pairs (member, non-member) the member wins, ties counting ½, over the last two dimensions' product."""
    m, n = m.unsqueeze(-1), n.unsqueeze(-2)
    return (m > n).sum((-2, -1)).double() + 0.5 * (m == n).sum((-2, -1)).double()


def _strata(member: torch.Tensor, strata: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per stratum with both sides: the positions of its members and of its non-members."""
    out = []
    for s in torch.unique(strata):
        here = strata == s
        m, n = (here & member).nonzero().flatten(), (here & ~member).nonzero().flatten()
        if len(m) and len(n):
            out.append((m, n))
    return out


def paired_advantage(score: torch.Tensor, member: torch.Tensor, strata: torch.Tensor) -> float:
    """2·AUC − 1 over the (member, non-member) pairs of each stratum (nan without a pair)."""
    groups = _strata(member, strata)
    pairs = sum(len(m) * len(n) for m, n in groups)
    if not pairs:
        return float("nan")
    wins = sum(float(_wins(score[m].double(), score[n].double())) for m, n in groups)
    return 2 * wins / pairs - 1


def interval(samples: torch.Tensor, level: float = LEVEL) -> list[float]:
    """The percentile interval of bootstrap ``samples``."""
    tail = (1 - level) / 2
    q = torch.quantile(samples.double(), torch.tensor([tail, 1 - tail], dtype=torch.float64))
    return [float(q[0]), float(q[1])]


def bootstrap_advantage(
    score: torch.Tensor, member: torch.Tensor, strata: torch.Tensor, seed: int, resamples: int = RESAMPLES
) -> torch.Tensor:
    """``paired_advantage`` of ``resamples`` resamples: each stratum's members and non-members drawn with
    replacement from themselves."""
    g = torch.Generator().manual_seed(seed)
    score = score.double()
    wins, pairs = torch.zeros(resamples, dtype=torch.float64), 0
    for m, n in _strata(member, strata):
        pairs += len(m) * len(n)
        step = max(1, PAIRS_PER_CHUNK // (len(m) * len(n)))
        pm = m[torch.randint(len(m), (resamples, len(m)), generator=g)]
        pn = n[torch.randint(len(n), (resamples, len(n)), generator=g)]
        for b in range(0, resamples, step):
            wins[b : b + step] += _wins(score[pm[b : b + step]], score[pn[b : b + step]])
    return 2 * wins / max(pairs, 1) - 1


def attack(
    score: torch.Tensor, member: torch.Tensor, strata: torch.Tensor, seed: int, resamples: int = RESAMPLES
) -> dict[str, float | int | list[float]]:
    """The membership advantage of ``score`` with its bootstrap interval; the records it compared and the strata left
    out (no member or no non-member)."""
    groups = _strata(member, strata)
    compared = sum(len(m) + len(n) for m, n in groups)
    out: dict[str, float | int | list[float]] = {
        "attack_records": compared,
        "attack_strata_left_out": len(torch.unique(strata)) - len(groups),
    }
    if not groups:
        return out
    return out | {
        "advantage": paired_advantage(score, member, strata),
        "advantage_ci": interval(bootstrap_advantage(score, member, strata, seed, resamples)),
    }


def leakage_interval(
    hits: torch.Tensor, chance: torch.Tensor, seed: int, resamples: int = RESAMPLES
) -> tuple[float, list[float]]:
    """The leakage score (rate − p̄) / (1 − p̄) over records (each record's mean hit and its chance p; fed.leakage)
    and its bootstrap interval, records resampled with replacement."""

    def score(h: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        rate, null = h.double().mean(-1), p.double().mean(-1)
        return (rate - null) / (1 - null)

    g = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(hits), (resamples, len(hits)), generator=g)
    return float(score(hits, chance)), interval(score(hits[picks], chance[picks]))
