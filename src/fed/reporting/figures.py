"""Figures (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_partition(part: dict, out: str | Path, title: str) -> None:
    """Clients × classes sample counts as a bubble chart (DA-FL Fig. 2 style), clients on the x axis."""
    counts = np.asarray(part["counts"])
    k, c = counts.shape
    fig, ax = plt.subplots(figsize=(min(2 + 0.12 * k, 18), 1.5 + 0.3 * c))
    xs, ys = np.nonzero(counts)
    sizes = counts[xs, ys]
    ax.scatter(xs, ys, s=300 * sizes / max(sizes.max(), 1), alpha=0.6, color="tab:blue")
    ax.set(xlabel="client", ylabel="class", title=f"{title}\n{k} clients, {counts.sum()} samples "
           f"(min/median/max per client {counts.sum(1).min()}/{int(np.median(counts.sum(1)))}/{counts.sum(1).max()})",
           yticks=range(c), xlim=(-1, k))
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
