"""The same cells on this machine and where they were committed: rerun committed cells here (Snakemake with
``--config reference_dir=null``), then compare each with its committed copy digit for digit — the tuning's scores,
every round's training loss, the last round's metric — beside both machines' kinds (``fed.provenance.kind``), as
Markdown. docs/results/headtohead.md ("The same cells on another CPU") has a run of it.

    python scripts/compare_machines.py reference/headtohead_protocol results \
        h2h_protocol/fmnist/h2h_scarce/p_fedavg/seed2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fed.provenance import kind


def _scores(record: dict) -> list[dict]:
    """The tuning's scores of a cell's record; none for an untuned cell."""
    return (record.get("tuning") or {}).get("scores", [])


def compare(committed: dict, here: dict, metric: str = "global_acc") -> dict:
    """Where two records of one cell part: whether the tuning's scores are equal, how many rounds' training losses
    are, the first round that differs, the largest loss difference and the metric after the last round."""
    scores = _scores(committed)
    losses = [(a["train_loss"], b["train_loss"]) for a, b in zip(committed["history"], here["history"], strict=True)]
    differ = [r for r, (a, b) in enumerate(losses, 1) if a != b]
    return {
        "committed on": kind(committed),
        "here": kind(here),
        "tuning equal": "–" if not scores else str(scores == _scores(here)).lower(),
        "rounds equal": f"{len(losses) - len(differ)} of {len(losses)}",
        "first differs": differ[0] if differ else "–",
        "largest Δ loss": f"{max(abs(a - b) for a, b in losses):.3g}",
        metric: f"{committed['last'][metric]:.2f} → {here['last'][metric]:.2f}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reference", type=Path, help="the committed cells' folder (holds runs/)")
    ap.add_argument("results", type=Path, help="the rerun's results folder (holds runs/)")
    ap.add_argument("cells", nargs="+", help="cells as their folders under runs/")
    args = ap.parse_args()
    rows = []
    for cell in args.cells:
        committed, here = (
            json.loads((d / "runs" / cell / "metrics.json").read_text()) for d in (args.reference, args.results)
        )
        rows.append({"cell": cell, **compare(committed, here)})
    print("| " + " | ".join(rows[0]) + " |\n|" + "---|" * len(rows[0]))
    print("\n".join("| " + " | ".join(str(v) for v in r.values()) + " |" for r in rows))


if __name__ == "__main__":
    main()
