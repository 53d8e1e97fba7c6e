"""Figures (matplotlib, Agg backend)."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def plot_partition(part: dict, out: str | Path, title: str) -> None:
    """Clients × classes sample counts as a bubble chart (DA-FL Fig. 2 style), clients on the x axis."""
    counts = np.asarray(part["counts"])
    k, c = counts.shape
    fig, ax = plt.subplots(figsize=(min(2 + 0.12 * k, 18), 1.5 + 0.3 * c))
    xs, ys = np.nonzero(counts)
    sizes = counts[xs, ys]
    ax.scatter(xs, ys, s=300 * sizes / max(sizes.max(), 1), alpha=0.6, color="tab:blue")
    ax.set(
        xlabel="client",
        ylabel="class",
        title=f"{title}\n{k} clients, {counts.sum()} samples "
        f"(min/median/max per client {counts.sum(1).min()}/{int(np.median(counts.sum(1)))}/{counts.sum(1).max()})",
        yticks=range(c),
        xlim=(-1, k),
    )
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def figure_caption(figure: dict, presets: dict[str, dict]) -> str:
    """A figure's caption: its title, then each preset it draws on with its reduction (or "paper setting") and
    note, then the ZSDG budget of a figure that inverts models itself (Fed-ZDA Figs. 3-4), which is the figure's own
    and not its source preset's."""
    from fed.zsdg import ZSDGConfig

    parts = [
        f"{name}: {p.get('reduction') or 'paper setting'}" + (f" ({p['note']})" if p.get("note") else "")
        for name, p in presets.items()
    ]
    if figure.get("zsdg"):
        z = ZSDGConfig.from_params(figure["zsdg"])
        parts.append(f"ZSDG for this figure: {z.per_class} images per class, {z.iterations} iterations, lr {z.lr}")
    return figure.get("title", figure["output"]) + " — " + "; ".join(parts)


def _title(fig, title: str) -> None:
    """A suptitle wrapped to the figure's width (captions carry the setting and its reduction)."""
    fig.suptitle(textwrap.fill(title, int(fig.get_figwidth() * 15)), fontsize=8)


def _save(fig, out: str | Path) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_start_round_variance(df, out: str | Path, title: str) -> None:
    """Fed-ZDA Fig. 5: client- and class-level variance (mean ± std over seeds) against the start round.
    ``df`` has columns dataset, start_round, seed, client_acc_variance, class_acc_variance."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, metric, label in zip(
        axes, ["client_acc_variance", "class_acc_variance"], ["client-level variance (%²)", "class-level variance (%²)"]
    ):
        for dataset, g in df.groupby("dataset"):
            stats = g.groupby("start_round")[metric].agg(["mean", "std", "count"]).reset_index()
            ax.errorbar(
                stats["start_round"],
                stats["mean"],
                yerr=stats["std"].fillna(0),
                marker="o",
                capsize=4,
                label=f"{dataset} (n={int(stats['count'].min())} seeds)",
            )
        ax.set(xlabel="start round of augmentation", ylabel=label, xticks=sorted(df["start_round"].unique()))
        ax.legend(fontsize=8)
    _title(fig, title)
    _save(fig, out)


def plot_zsdg_class_accuracy(df, out: str | Path, title: str) -> None:
    """Fed-ZDA Fig. 3: per dataset, bars of the FL model's per-class test accuracy (blue) and the oracle's
    accuracy on the ZSDG images of each class (red). ``df``: dataset, class, model_acc, oracle_acc."""
    datasets = list(dict.fromkeys(df["dataset"]))
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        g = df[df["dataset"] == dataset]
        x = np.arange(len(g))
        ax.bar(x - 0.2, g["model_acc"], 0.4, color="tab:blue", label="FL model, test set")
        ax.bar(x + 0.2, g["oracle_acc"], 0.4, color="tab:red", label="oracle on ZSDG images")
        ax.set(title=dataset, xlabel="class", ylabel="accuracy (%)", xticks=x, ylim=(0, 105))
        ax.legend(fontsize=7, loc="lower right")
    _title(fig, title)
    _save(fig, out)


def plot_image_grids(panels: dict[str, np.ndarray], out: str | Path, title: str) -> None:
    """Fed-ZDA Fig. 4: one image grid (H, W, C in [0, 1]) per model."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.6), squeeze=False)
    for ax, (label, grid) in zip(axes[0], panels.items()):
        ax.imshow(grid.squeeze(), cmap="gray" if grid.shape[-1] == 1 else None)
        ax.set_title(label, fontsize=9)
        ax.axis("off")
    _title(fig, title)
    _save(fig, out)


def tile(images, nrow: int = 4) -> np.ndarray:
    """Images (N, C, H, W) in [0, 1] (a torch tensor) → one (H, W, C) grid (torchvision's make_grid)."""
    import torchvision

    grid = torchvision.utils.make_grid(images.clamp(0, 1), nrow=nrow, padding=1, pad_value=1.0)
    return grid.permute(1, 2, 0).numpy()


METRIC_LABELS = {
    "global_acc": "global test accuracy (%)",
    "flea_exposure": "feature exposure ε(t)",
    "flea_dcor_shared": "distance correlation ρ (shared features)",
    "flea_dcor_batch": "distance correlation R per local batch",
}
DASHES = ("--", ":", "-.", (0, (6, 2, 1, 2, 1, 2)))  # the paper's values of a seed study's methods, one dash each


def _colours(names) -> dict[str, str]:
    """One colour per name, in order of first appearance: a line keeps it in every panel, drawn there or not."""
    return {name: f"C{i % 10}" for i, name in enumerate(dict.fromkeys(names))}


def _kept_mean_std(m, by: str, metric: str, name: str):
    """``metric``'s mean and std per ``by`` over the runs of ``m`` that did not diverge, and ``name`` with the
    diverged runs counted (a run: a seed, at one x where the rows have one)."""
    diverged = m.diverged.astype(bool)
    lost = len(m[diverged].drop_duplicates([k for k in ("x", "seed") if k in m]))
    stats = m[~diverged].groupby(by)[metric].agg(["mean", "std"]).reset_index()
    return stats, name + (f" ({lost} diverged)" if lost else "")


def plot_accuracy_curves(df, out: str | Path, title: str, metric: str = "global_acc", per_seed: bool = False) -> None:
    """DA-FL Fig. 4 / 6, FLea Fig. 6 / 9: ``metric`` per round, mean ± std over seeds, one panel per (dataset,
    partition). ``df``: dataset, partition, method, seed, round, metric, diverged (diverged seeds are left out of
    the curve and counted in its legend entry). A method keeps its colour in every panel. ``per_seed``: a line per
    (method, seed), each in its own colour, a diverged seed's marked. A ``paper_value`` column (the paper's number
    of each panel and method) is drawn across the panel, dashed, in the method's colour (with ``per_seed`` black,
    each method's in its own dash)."""
    lines = df.method + (", seed " + df.seed.astype(str) if per_seed else "")
    colour = _colours(lines)
    panels = list(dict.fromkeys(zip(df.dataset, df.partition)))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (dataset, partition) in zip(axes[0], panels):
        g = df[(df.dataset == dataset) & (df.partition == partition)]
        for dash, (method, m) in zip(itertools.cycle(DASHES), g.groupby("method", sort=False)):
            if per_seed:
                for seed, s in m.groupby("seed"):
                    name = f"{method}, seed {seed}"
                    label = name + (" (diverged)" if s.diverged.astype(bool).any() else "")
                    ax.plot(s["round"], s[metric], label=label, lw=1.0, color=colour[name])
            else:
                stats, label = _kept_mean_std(m, "round", metric, method)
                ax.plot(stats["round"], stats["mean"], label=label, lw=1.2, color=colour[method])
                ax.fill_between(
                    stats["round"],
                    stats["mean"] - stats["std"].fillna(0),
                    stats["mean"] + stats["std"].fillna(0),
                    alpha=0.2,
                    color=colour[method],
                )
            if "paper_value" in m and m.paper_value.notna().any():
                value = m.paper_value.dropna().iloc[0]
                style = {"ls": dash, "color": "k"} if per_seed else {"ls": "--", "color": colour[method]}
                ax.axhline(value, lw=1, label=f"{method}: paper ({value:g})", **style)
        ax.set(title=f"{dataset}, {partition}", xlabel="communication round", ylabel=METRIC_LABELS.get(metric, metric))
        ax.legend(fontsize=7)
    _title(fig, title)
    _save(fig, out)


def plot_metric_vs_x(df, metric: str, x_label: str, out: str | Path, title: str, beta_density=None) -> None:
    """FedDPMS' accuracy vs β: ``metric`` against ``x`` per line, mean ± std over seeds (error bars), one panel per
    dataset, x on a log scale when it spans a decade. ``df``: dataset, x, line, seed, metric, diverged (diverged
    seeds are left out, and said so in the legend), and optionally role: rows of role "reference" (a method with no
    x) are drawn as a horizontal band, mean ± std; rows of role "paper" (the published values) dashed, with open
    markers, in their line's colour. ``beta_density``: values a whose Beta(a, a) densities are drawn
    in a first panel (FLea Fig. 10, left)."""
    datasets = list(dict.fromkeys(df.dataset))
    panels = len(datasets) + (beta_density is not None)
    fig, axes = plt.subplots(1, panels, figsize=(4.4 * panels, 3.6), squeeze=False)
    if beta_density is not None:
        _beta_densities(axes[0][0], beta_density)
    role = df.role if "role" in df else pd.Series("sweep", index=df.index)
    colour = _colours(df.line[role == "sweep"])
    for ax, dataset in zip(axes[0][panels - len(datasets) :], datasets):
        g = df[(df.dataset == dataset) & (role == "sweep")]
        for line, m in g.groupby("line", sort=False):
            stats, label = _kept_mean_std(m, "x", metric, line)
            yerr = stats["std"].fillna(0)
            ax.errorbar(stats.x, stats["mean"], yerr=yerr, label=label, marker="o", ms=3, capsize=2, color=colour[line])
        for line, m in df[(df.dataset == dataset) & (role == "paper")].groupby("line", sort=False):
            m = m.sort_values("x")
            ax.plot(
                m.x,
                m[metric],
                ls="--",
                marker="o",
                ms=4,
                mfc="none",
                color=colour.get(line, "k"),
                label=f"{line} (paper)",
            )
        for line, m in df[(df.dataset == dataset) & (role == "reference")].groupby("line", sort=False):
            kept = m[~m.diverged.astype(bool)][metric]
            mean, std = kept.mean(), kept.std() if len(kept) > 1 else 0.0
            ax.axhline(mean, color="k", ls="--", lw=1, label=f"{line} (reference)")
            ax.axhspan(mean - std, mean + std, color="k", alpha=0.08)
        if g.x.max() >= 10 * g.x.min() > 0:
            ax.set_xscale("log")
        ax.set(title=dataset, xlabel=x_label, ylabel=metric.replace("global_acc", "global test accuracy (%)"))
        ax.legend(fontsize=7)
    _title(fig, title)
    _save(fig, out)


def _beta_densities(ax, values) -> None:
    """Densities of the symmetric Beta(a, a) (torch.distributions) on (0, 1)."""
    import torch

    x = torch.linspace(0.005, 0.995, 199)
    for a in values:
        density = torch.distributions.Beta(torch.tensor(float(a)), torch.tensor(float(a))).log_prob(x).exp()
        ax.plot(x.numpy(), density.numpy(), label=f"a = {a:g}")
    ax.set(title="Beta(a, a)", xlabel="mixing weight β", ylabel="density", ylim=(0, 4))  # a < 1 diverges at 0 and 1
    ax.legend(fontsize=7)


def plot_stage_cost(df, gan_method: str, out: str | Path, title: str) -> None:
    """DA-FL Fig. 7: seconds per method and scenario; the DA-FL bar stacks its GAN stage (clients summed) on its FL
    stage. ``df``: dataset, partition, method, seed, stage, seconds."""
    mean = df.groupby(["dataset", "partition", "method", "stage"], sort=False).seconds.mean().reset_index()
    scenarios = list(dict.fromkeys(zip(mean.dataset, mean.partition)))
    methods = list(dict.fromkeys(mean.method))
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(scenarios)), 3.8))
    for i, method in enumerate(methods):
        x = np.arange(len(scenarios)) + i * width
        fl = [_value(mean, s, method, "FL") for s in scenarios]
        ax.bar(x, fl, width, label=f"{method}" + (" (FL stage)" if method == gan_method else ""))
        if method == gan_method:
            gan = [_value(mean, s, method, "GAN (sum over clients)") for s in scenarios]
            ax.bar(x, gan, width, bottom=fl, hatch="//", color="none", edgecolor="k", label=f"{method} (GAN stage)")
    ax.set(xticks=np.arange(len(scenarios)) + 0.4 - width / 2, ylabel="seconds")
    ax.set_xticklabels([f"{d}\n{p}" for d, p in scenarios], fontsize=8)
    ax.legend(fontsize=7, ncol=2)
    _title(fig, title)
    _save(fig, out)


def _value(df, scenario, method, stage) -> float:
    g = df[(df.dataset == scenario[0]) & (df.partition == scenario[1]) & (df.method == method) & (df.stage == stage)]
    return float(g.seconds.iloc[0]) if len(g) else 0.0


def plot_flea_batch(df, out: str | Path, title: str) -> None:
    """FLea Figs. 7 and 8, one row per (dataset, round): class counts of the buffer F(t), of the client's D_k and the
    class mass of its augmented batch B̃ as grouped bars; β_i of that batch per sample. ``df``: batch_rows' form."""
    groups = list(dict.fromkeys(zip(df.dataset, df["round"])))
    fig, axes = plt.subplots(len(groups), 2, figsize=(10, 3.2 * len(groups)), squeeze=False)
    for (bars, betas), (dataset, r) in zip(axes, groups):
        g = df[(df.dataset == dataset) & (df["round"] == r)]
        client = int(g.client.iloc[0])
        parts = [("buffer", "F(t)"), ("local", f"D_k (client {client})"), ("mixed", "B̃ (soft labels)")]
        width = 0.8 / len(parts)
        for i, (what, label) in enumerate(parts):
            s = g[g.what == what]
            share = s.value / s.value.sum() if s.value.sum() else s.value  # shares: the three differ in size
            bars.bar(s["index"] + (i - 1) * width, share, width, label=label)
        bars.set(title=f"{dataset}, round {r}: classes", xlabel="class", ylabel="share")
        bars.legend(fontsize=7)
        b = g[g.what == "beta"]
        betas.bar(b["index"], b.value, color="tab:gray")
        betas.set(title=f"β_i of that batch (mean {b.value.mean():.2f})", xlabel="sample", ylabel="β", ylim=(0, 1))
    _title(fig, title)
    _save(fig, out)


def plot_reconstruction(df, x_label: str, out: str | Path, title: str) -> None:
    """FLea Fig. 9(c): the attacker's training MSE per epoch, one line per x and attacked round (mean over seeds),
    one panel per (dataset, partition). ``df``: one row per attacked model with ``curve`` (JSON list of MSE per
    epoch), ``x`` and ``round`` (empty: the cell's final model)."""
    import json

    groups = list(dict.fromkeys(zip(df.dataset, df.partition)))
    fig, axes = plt.subplots(1, len(groups), figsize=(4.6 * len(groups), 3.6), squeeze=False)
    for ax, (dataset, partition) in zip(axes[0], groups):
        g = df[(df.dataset == dataset) & (df.partition == partition) & ~df.diverged.astype(bool)]
        for (x, round_), m in g.groupby(["x", g["round"].fillna(0)], sort=True):
            curves = np.array([json.loads(c) for c in m.curve])
            mean = curves.mean(0)
            after = f", round {round_:g}" if round_ else ""
            label = f"{x_label} = {x:g}{after} ({len(curves)} seeds)"
            ax.plot(np.arange(1, len(mean) + 1), mean, marker="o", ms=3, label=label)
        ax.set(title=f"{dataset} / {partition}", xlabel="attacker epoch", ylabel="reconstruction MSE (training)")
        ax.legend(fontsize=7)
    _title(fig, title)
    _save(fig, out)


def plot_feature_separability(df, embeddings: dict, out: str | Path, title: str) -> None:
    """FLea Fig. 3: a t-SNE per source (global model, test set, coloured by class), then the Davies–Bouldin scores:
    bars per (model, data) and source, mean over clients and seeds (lower = better separated)."""
    sources = list(embeddings)
    fig, axes = plt.subplots(1, len(sources) + 1, figsize=(4.2 * (len(sources) + 1), 3.8), squeeze=False)
    for ax, source in zip(axes[0], sources):
        xy, y = embeddings[source]
        ax.scatter(xy[:, 0], xy[:, 1], c=y, cmap="tab10", s=3)
        ax.set(title=f"t-SNE, {source}", xticks=[], yticks=[])
    ax = axes[0][-1]
    groups = [("global", "train"), ("local", "train"), ("global", "test"), ("local", "test")]
    width = 0.8 / max(len(sources), 1)
    for i, source in enumerate(sources):
        g = df[df.source == source].dropna(subset=["db"])
        means = [g[(g.model == m) & (g.data == d)].db.mean() for m, d in groups]
        ax.bar(np.arange(len(groups)) + i * width, means, width, label=source)
    ax.set_xticks(np.arange(len(groups)) + width * (len(sources) - 1) / 2, [f"{m}\n{d}" for m, d in groups])
    ax.set(ylabel="Davies–Bouldin (lower: separated)", title="class separation of representations")
    ax.legend(fontsize=7)
    _title(fig, title)
    _save(fig, out)


def plot_context_attack(df, out: str | Path, title: str) -> None:
    """FLea Fig. 9(d): the detector's held-out accuracy against its training items (log x), one line per kind of
    shared item, mean ± std over seeds, one panel per dataset."""
    datasets = list(dict.fromkeys(df.dataset))
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.6 * len(datasets), 3.6), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        g = df[df.dataset == dataset]
        for shared, m in g.groupby("shared", sort=False):
            stats = m.groupby("n").accuracy.agg(["mean", "std"]).reset_index()
            ax.errorbar(
                stats.n,
                100 * stats["mean"],
                yerr=100 * stats["std"].fillna(0),
                marker="o",
                ms=3,
                capsize=2,
                label=shared,
            )
        ax.axhline(50, color="grey", lw=0.8, ls=":")
        ax.set(xscale="log", title=dataset, xlabel="attacker training items", ylabel="marker detection accuracy (%)")
        ax.legend(fontsize=7)
    _title(fig, title)
    _save(fig, out)


def plot_gain_heatmap(df, rows: list[str], columns: list[str], metric: str, higher: bool, out, title: str) -> None:
    """Methods (``rows``) × regimes (``columns``) of ``metric``'s mean paired difference to the baseline (``df``:
    ``fed.reporting.leaderboard.gains`` with a ``label`` column), each cell annotated with the number and * where
    significant after Holm; a diverging colormap centred at 0, blue where the method is better (higher accuracy,
    lower variance), empty cells (no pair) grey."""
    from matplotlib.colors import TwoSlopeNorm

    from fed.metrics import LOWER_IS_BETTER

    grid = df.pivot_table(index="label", columns="regime", values="diff", aggfunc="first", dropna=False)
    grid = grid.reindex(index=rows, columns=columns)
    marks = df.set_index(["label", "regime"]).significant
    baseline = df.baseline.iloc[0] if len(df) else "the baseline"
    values = grid.to_numpy(dtype=float)
    bound = np.nanmax(np.abs(values)) if np.isfinite(values).any() else 1.0
    bound = bound if bound > 0 else 1.0
    fig, ax = plt.subplots(figsize=(3.0 + 1.15 * len(columns), 1.8 + 0.42 * len(rows)))
    cmap = plt.get_cmap("RdBu" if higher else "RdBu_r").with_extremes(bad="#dddddd")
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=TwoSlopeNorm(0.0, -bound, bound), aspect="auto")
    for i, label in enumerate(rows):
        for j, regime in enumerate(columns):
            v = values[i, j]
            text = "—" if not np.isfinite(v) else f"{v:+.2f}" + ("*" if marks.get((label, regime), False) else "")
            dark = np.isfinite(v) and abs(v) > 0.6 * bound
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    ax.set_xticks(range(len(columns)), columns, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_xlabel(
        f"mean paired difference to {baseline} over seeds; * p < 0.05 by a paired t-test over seeds, Holm-corrected",
        fontsize=7,
    )
    if "all regimes" in columns:
        ax.axvline(columns.index("all regimes") - 0.5, color="k", lw=1)
    unit = "pp²" if metric in LOWER_IS_BETTER else "pp"  # the variances of accuracies (%), or accuracies
    bar = fig.colorbar(image, ax=ax, shrink=0.9)
    bar.set_label(f"{metric} − {baseline} ({unit})\nblue: better than {baseline}", fontsize=8)
    _title(fig, title)
    _save(fig, out)


def plot_verdict_deltas(cells: pd.DataFrame, out: str | Path, title: str) -> None:
    """The report's first picture: every compared cell (``fed.reporting.summary.compared_cells``) as ours − paper,
    one row per paper, table (by its ``label``: two of our tables of one published chart share a row) and metric,
    each point coloured by its verdict, ± our std over seeds where there are several, the row's counts at its end.
    Accuracies (pp) and variances (pp², lower is better) have panels of their own: their scales differ."""
    from matplotlib.lines import Line2D

    from fed.metrics import LOWER_IS_BETTER
    from fed.reporting.verdicts import ABOVE, BELOW, REPRODUCED

    style = {REPRODUCED: ("#2e7d32", "o", "✓"), ABOVE: ("#1565c0", "^", "↑"), BELOW: ("#c62828", "v", "↓")}
    units = {"pp": "accuracy", "pp²": "variance; lower is better"}
    cells = cells.assign(unit=np.where(cells.metric.isin(LOWER_IS_BETTER), "pp²", "pp"))
    panels = [u for u in units if (cells.unit == u).any()]
    keys = ["paper", "label", "metric"]
    heights = [cells[cells.unit == u].groupby(keys, sort=False).ngroups for u in panels] or [1]
    fig, axes = plt.subplots(
        len(heights), 1, figsize=(9, 1.6 + 0.42 * sum(heights)), height_ratios=heights, squeeze=False
    )
    for ax, unit in zip(axes[:, 0], panels):
        rows = list(cells[cells.unit == unit].groupby(keys, sort=False))
        for i, (_, row) in enumerate(rows):
            y = i + (np.linspace(-0.25, 0.25, len(row)) if len(row) > 1 else np.zeros(1))
            err = np.nan_to_num(row.ours_std.where(row.seeds > 1).to_numpy(dtype=float))
            for verdict, (colour, marker, _) in style.items():
                at = (row.verdict == verdict).to_numpy()
                if at.any():
                    x = row.delta.to_numpy(dtype=float)[at]
                    ax.errorbar(x, y[at], xerr=err[at], fmt=marker, color=colour, ms=5, elinewidth=0.8)
            counts = row.verdict.value_counts()
            text = "  ".join(f"{counts.get(v, 0)} {mark}" for v, (_, _, mark) in style.items())
            ax.text(1.01, i, text, transform=ax.get_yaxis_transform(), va="center", fontsize=8)
        names = [textwrap.fill(" · ".join(map(str, key)), 40) for key, _ in rows]
        ax.set_yticks(range(len(rows)), names, fontsize=8)
        ax.set_ylim(len(rows) - 0.5, -0.5)  # the first row on top
        ax.axvline(0, color="k", lw=0.8)
        ax.grid(axis="x", lw=0.3)
        ax.set_xlabel(f"ours − paper ({unit}; {units[unit]})", fontsize=8)
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no cell compared with a paper's number", ha="center", va="center")
        axes[0, 0].set_axis_off()
    handles = [Line2D([], [], ls="", marker=m, color=c, label=f"{mark} {v}") for v, (c, m, mark) in style.items()]
    axes[0, 0].legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)
    _title(fig, title)
    _save(fig, out)
