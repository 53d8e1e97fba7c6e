"""Figure kinds on constructed cells: the numbers they plot (their CSV), not the pixels."""

import json

import pandas as pd
import pytest

from fed.reporting.figure_kinds import FIGURE_KINDS


def record(report: str, history: list[dict]) -> dict:
    best = max((r for r in history if r.get("global_acc") is not None), key=lambda r: r["global_acc"])
    return {"config": {"report": report}, "best": best, "last": history[-1], "history": history, "diverged": False}


def sweep(**keys) -> dict:
    """A ``metric_vs_x`` figure over methods, on one dataset and partition."""
    return {"output": "t/fig", "preset": "p", "datasets": ["d"], "partitions": ["qua3"], "x_of": "method", **keys}


def write_records(cells, tmp_path, history) -> list:
    """One best-round metrics.json per cell with the rounds ``history(cell)``; the files as ``draw`` takes them."""
    files = []
    for c in cells:
        path = tmp_path / f"{c['method']}-{c['seed']}.json"
        path.write_text(json.dumps(record("best", history(c))))
        files.append((path, None))
    return files


def audionet_cells(cells, tmp_path, root):
    """One trained-looking cell per method: the same AudioNet (seed 0) and a record with best accuracy 50 + seed;
    returns the (metrics, model) files and the prepared synthetic data, per cell."""
    import torch

    from fed.models import build_model

    files = []
    for c in cells:
        torch.manual_seed(0)
        torch.save(build_model("audionet", 1, 10, 28).state_dict(), tmp_path / f"{c['method']}.pt")
        rec = {"dataset": "synthetic", "config": {"model": "audionet", "report": "best"}, "diverged": False}
        rec["best"] = {"global_acc": 50.0 + c["seed"]}
        (tmp_path / f"{c['method']}.json").write_text(json.dumps(rec))
        files.append((tmp_path / f"{c['method']}.json", tmp_path / f"{c['method']}.pt"))
    return files, [root / "synthetic" / "tensors.pt"] * len(cells)


@pytest.mark.parametrize("value", ["reported", "mean_over_rounds"])
def test_metric_vs_x_plots_the_reported_round_or_the_mean_over_rounds(tmp_path, value):
    kind = FIGURE_KINDS["metric_vs_x"]
    fig = sweep(
        methods=["flea_l0", "flea_l3"],
        seeds=[0],
        x_values={"flea_l0": 0, "flea_l3": 3},
        metric="flea_dcor_shared",
        value=value,
    )
    cells = kind.cells(fig)
    rho = {"flea_l0": [0.9, 0.8, 0.7], "flea_l3": [0.6, 0.5, 0.1]}
    acc = [50.0, 70.0, 60.0]  # the best round is round 2
    files = write_records(
        cells,
        tmp_path,
        lambda c: [{"round": r + 1, "global_acc": acc[r], "flea_dcor_shared": rho[c["method"]][r]} for r in range(3)],
    )
    kind.draw(fig, cells, files, [], tmp_path / "f.png", tmp_path / "f.csv", "caption")
    got = pd.read_csv(tmp_path / "f.csv").set_index("x")["flea_dcor_shared"]
    want = {0: 0.8, 3: 0.5} if value == "reported" else {0: 0.8, 3: 0.4}
    assert got.to_dict() == pytest.approx(want)
    assert set(pd.read_csv(tmp_path / "f.csv").report) == {"best" if value == "reported" else value}
    assert (tmp_path / "f.png").stat().st_size > 0


def test_metric_vs_x_draws_series_of_methods_and_a_reference_band(tmp_path):
    """FLea Fig. 6 (right): FedMix and FLea as two lines over the proportion of shared augmentations; Fig. 10: FedAvg
    as a reference band beside the Beta(a, a) sweep, with the densities in a first panel."""
    kind = FIGURE_KINDS["metric_vs_x"]
    fig = sweep(
        methods=["fedmix_s0.5", "fedmix", "flea_s0.05", "flea"],
        seeds=[0, 1],
        x_values={"fedmix_s0.5": 0.05, "fedmix": 0.1, "flea_s0.05": 0.05, "flea": 0.1},
        series={"fedmix_s0.5": "FedMix", "fedmix": "FedMix", "flea_s0.05": "FLea", "flea": "FLea"},
        reference="fedavg",
        x_density="beta_symmetric",
    )
    cells = kind.cells(fig)
    assert [c["method"] for c in cells[-2:]] == ["fedavg", "fedavg"] and len(cells) == 10
    acc = {"fedmix_s0.5": 40, "fedmix": 45, "flea_s0.05": 50, "flea": 55, "fedavg": 30}
    files = write_records(cells, tmp_path, lambda c: [{"round": 1, "global_acc": acc[c["method"]] + c["seed"]}])
    kind.draw(fig, cells, files, [], tmp_path / "f.png", tmp_path / "f.csv", "caption")
    df = pd.read_csv(tmp_path / "f.csv")
    swept = df[df.role == "sweep"].groupby(["line", "x"]).global_acc.mean().to_dict()
    assert swept == {("FedMix", 0.05): 40.5, ("FedMix", 0.1): 45.5, ("FLea", 0.05): 50.5, ("FLea", 0.1): 55.5}
    reference = df[df.role == "reference"]
    assert list(reference.global_acc) == [30, 31] and reference.x.isna().all() and set(reference.line) == {"fedavg"}
    assert (tmp_path / "f.png").stat().st_size > 0
    with pytest.raises(ValueError, match="series"):
        kind.cells({**fig, "series": {"fedmix": "FedMix"}})


def test_metric_vs_x_draws_the_paper_s_values_beside_each_line(monkeypatch, tmp_path):
    """paper_table: FedDPMS' FMNIST chart (fed/reporting/data/feddpms.csv) beside the cells run, at every β the chart
    has, on the method's line and in its colour, dashed; a table the paper lacks, or x_of: method, fails in cells()."""
    from fed.reporting import figures

    kind = FIGURE_KINDS["metric_vs_x"]
    beta = {f"dir0.{i}": i / 10 for i in range(1, 6)}
    fig = dict(
        output="t/fig", paper="feddpms", preset="p", datasets=["fmnist"], partitions=["dir0.1", "dir0.5"],
        methods=["fedavg", "fedprox_mu0.001"], seeds=[0], x_values=beta, labels={"fedprox_mu0.001": "fedprox"},
        paper_table="accuracy vs β (FMNIST figure)",
    )  # fmt: skip
    cells = kind.cells(fig)
    files = []
    for c in cells:
        path = tmp_path / f"{c['partition']}-{c['method']}.json"
        path.write_text(json.dumps(record("best", [{"round": 1, "global_acc": 90.0 + beta[c["partition"]]}])))
        files.append((path, None))
    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda f, out: drawn.setdefault("fig", f))
    kind.draw(fig, cells, files, [], tmp_path / "f.png", tmp_path / "f.csv", "caption")
    df = pd.read_csv(tmp_path / "f.csv")
    ours = df[df.role == "sweep"].set_index(["line", "x"]).global_acc.to_dict()
    assert ours == {("fedavg", 0.1): 90.1, ("fedavg", 0.5): 90.5, ("fedprox", 0.1): 90.1, ("fedprox", 0.5): 90.5}
    paper = df[df.role == "paper"].set_index(["line", "x"]).global_acc.to_dict()
    assert paper == {
        **{("fedavg", b): v for b, v in zip((0.1, 0.2, 0.3, 0.4, 0.5), (79.5, 82.72, 83.87, 84.29, 84.73))},
        **{("fedprox", b): v for b, v in zip((0.1, 0.2, 0.3, 0.4, 0.5), (79.62, 82.47, 83.46, 83.7, 84.44))},
    }  # the chart as transcribed (feddpms.csv)
    (ax,) = drawn["fig"].axes
    dashed = {
        line.get_label(): (line.get_color(), line.get_linestyle()) for line in ax.lines if "paper" in line.get_label()
    }
    ours = {c.get_label(): c.lines[0].get_color() for c in ax.containers}
    assert dashed == {"fedavg (paper)": (ours["fedavg"], "--"), "fedprox (paper)": (ours["fedprox"], "--")}
    with pytest.raises(ValueError, match="has no global_acc in table 'no such table'"):
        kind.cells({**fig, "paper_table": "no such table"})
    with pytest.raises(ValueError, match="x_of: partition"):
        kind.cells({**fig, "x_of": "method", "x_values": {"fedavg": 1, "fedprox_mu0.001": 2}})


def test_the_decoder_maps_maps_and_vectors_back_to_the_input_shape():
    import torch

    from fed.attacks import FeatureDecoder

    for shape in [(16, 7, 7), (64,), (16, 16, 86)]:
        inputs = (2, 64, 344) if shape == (16, 16, 86) else (1, 28, 28)
        out = FeatureDecoder(shape, inputs, width=8)(torch.zeros(3, *shape))
        assert tuple(out.shape) == (3, *inputs), shape


def test_an_attacker_reconstructs_better_from_features_that_carry_the_input():
    import torch
    from torch import nn

    from fed.attacks import reconstruction_curve

    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 1, 8, 8, generator=g)
    carries = reconstruction_curve(nn.Identity(), x, 8, torch.Generator().manual_seed(1), lr=1e-2, width=8)
    nothing = reconstruction_curve(lambda v: torch.zeros_like(v), x, 8, torch.Generator().manual_seed(1), width=8)
    assert carries[-1] < 0.5 * carries[0]  # it learns to invert what it is given
    assert nothing[-1] > 0.9 and carries[-1] < 0.5 * nothing[-1]  # nothing to invert: MSE stays near Var(x) = 1


def test_the_reconstruction_figure_attacks_each_cell_s_final_model(synthetic_root, tmp_path):

    kind = FIGURE_KINDS["reconstruction_attack"]
    fig = {
        "output": "t/fig9c",
        "preset": "p",
        "datasets": ["synthetic"],
        "partitions": ["qua3"],
        "methods": ["flea_l1_1", "flea"],
        "x_values": {"flea_l1_1": 0, "flea": 3},
        "seeds": [0],
        "samples": 128,
        "epochs": 2,
        "width": 8,
    }
    cells = kind.cells(fig)
    files, data = audionet_cells(cells, tmp_path, synthetic_root)
    kind.draw(fig, cells, files, [], tmp_path / "f.png", tmp_path / "f.csv", "caption", data=data)
    df = pd.read_csv(tmp_path / "f.csv")
    assert df.x.tolist() == [0, 3] and df.global_acc.tolist() == [50.0, 50.0]
    curves = [json.loads(c) for c in df.curve]
    assert all(len(c) == 2 for c in curves) and df.mse.tolist() == pytest.approx([c[-1] for c in curves])
    assert curves[0] == pytest.approx(curves[1])  # the same model and seed: the same attack
    with pytest.raises(ValueError, match="x_values has no value"):
        kind.cells({**fig, "x_values": {"flea": 3}})


def test_with_rounds_the_attack_figures_attack_each_cell_s_model_at_those_rounds(synthetic_root, tmp_path):
    """FLea Fig. 9 attacks the models of rounds 1 and 10: each cell's ``model_at`` stages, one per round, in
    ``stages`` order; the CSV keeps the cell's final accuracy (what the accuracy claim weighs) beside the attacked
    model's. The round-10 stage here holds a different model, so its attack differs from round 1's."""
    import torch

    from fed.models import build_model

    fig = {"output": "t/fig9c", "preset": "p", "datasets": ["synthetic"], "partitions": ["qua3"], "seeds": [0]}
    fig |= {"methods": ["flea_l1_1", "flea"], "x_values": {"flea_l1_1": 0, "flea": 3}, "rounds": [1, 10]}
    fig |= {"samples": 128, "epochs": 2, "width": 8, "sizes": [10, 40], "test": 60, "mean_batch": 5}
    kinds = FIGURE_KINDS["reconstruction_attack"], FIGURE_KINDS["context_attack"]
    expected = [
        (m, "synthetic", "qua3", 0, f"model_at-method{m}-rounds{r}") for m in ("flea_l1_1", "flea") for r in (1, 10)
    ]
    for kind in kinds:
        assert [(s.param("method"), d, p, seed, s.key) for pr, d, p, seed, s in kind.stages(fig, {})] == [
            (m, d, p, seed, key) for m, d, p, seed, key in expected
        ]
    cells = kinds[0].cells(fig)
    files, data = audionet_cells(cells, tmp_path, synthetic_root)
    stages = []
    for c in cells:
        for r in fig["rounds"]:
            torch.manual_seed(r)  # round 10's model differs from round 1's
            state = build_model("audionet", 1, 10, 28).state_dict()
            record = {"state": state, "model": "audionet", "dataset": "synthetic", "round": r, "diverged": False}
            torch.save(record | {"last": {"global_acc": 40.0 + r}}, tmp_path / f"{c['method']}-{r}.pt")
            stages.append(tmp_path / f"{c['method']}-{r}.pt")
    kinds[0].draw(fig, cells, files, stages, tmp_path / "f.png", tmp_path / "f.csv", "caption", data=data)
    df = pd.read_csv(tmp_path / "f.csv")
    assert df[["method", "round", "x"]].values.tolist() == [
        ["flea_l1_1", 1, 0],
        ["flea_l1_1", 10, 0],
        ["flea", 1, 3],
        ["flea", 10, 3],
    ]
    assert df.global_acc.tolist() == [50.0] * 4 and df.attacked_acc.tolist() == [41.0, 50.0, 41.0, 50.0]
    curves = [json.loads(c) for c in df.curve]
    assert curves[0] == pytest.approx(curves[2]) and curves[0] != pytest.approx(curves[1])
    kinds[1].draw(fig, cells, files, stages, tmp_path / "g.png", tmp_path / "g.csv", "caption", data=data)
    shared = set(pd.read_csv(tmp_path / "g.csv").shared)
    assert shared == {"FedMix averages of 5"} | {
        f"{m} features, round {r}" for m in ("flea", "flea_l1_1") for r in (1, 10)
    }


def test_fig3_scores_class_separation_before_and_after_one_local_update(synthetic_root, tmp_path):
    import torch
    from sklearn.metrics import davies_bouldin_score

    from fed.data.datasets import load_dataset, load_labels
    from fed.data.partition import make_partition
    from fed.models import build_model

    kind = FIGURE_KINDS["feature_separability"]
    fig = {
        "sources": {
            "many": {"preset": "a", "partition": "iid", "method": "fedavg"},
            "few": {"preset": "b", "partition": "iid", "method": "fedavg"},
        },
        "datasets": ["synthetic"],
        "seeds": [0],
        "clients": 2,
        "samples": 100,
    }
    cells = kind.cells(fig)
    labels = load_labels("synthetic", synthetic_root)
    files = []
    for c, clients in zip(cells, (4, 20)):
        part = tmp_path / f"{c['preset']}.json"
        part.write_text(json.dumps(make_partition(labels, "iid", clients, 0, 0.0)))
        torch.manual_seed(0)
        torch.save(build_model("cnn_mnist", 1, 10, 28).state_dict(), tmp_path / f"{c['preset']}.pt")
        config = {"model": "cnn_mnist", "report": "last", "lr": 0.05, "momentum": 0.0, "optimizer": "sgd"}
        config |= {"weight_decay": 0.0, "batch_size": 10, "local_epochs": 1}
        rec = {"dataset": "synthetic", "config": config, "diverged": False, "partition_file": str(part)}
        (tmp_path / f"{c['preset']}.json_").write_text(json.dumps(rec))
        files.append((tmp_path / f"{c['preset']}.json_", tmp_path / f"{c['preset']}.pt"))
    data = [synthetic_root / "synthetic" / "tensors.pt"] * 2
    kind.draw(fig, cells, files, [], tmp_path / "f.png", tmp_path / "f.csv", "caption", data=data)
    df = pd.read_csv(tmp_path / "f.csv")
    # per source: the global model on the test set, then per client global/local on its data and local on test
    assert len(df) == 2 * (1 + 2 * 3) and set(df.source) == {"many", "few"}
    model = build_model("cnn_mnist", 1, 10, 28).eval()
    model.load_state_dict(torch.load(tmp_path / "a.pt"))
    test = load_dataset("synthetic", synthetic_root, "test")
    with torch.no_grad():
        want = davies_bouldin_score(model.embed(test.x[:100]).numpy(), test.y[:100].numpy())
    got = df[(df.source == "many") & (df.model == "global") & (df.data == "test")].db.item()
    assert got == pytest.approx(want, rel=1e-5)
    train = df[(df.data == "train")].pivot_table(index=["source", "client"], columns="model", values="db")
    assert (train["local"] != train["global"]).all()  # the local update moved the representations
    assert (tmp_path / "f.png").stat().st_size > 0


def test_a_context_marker_is_found_in_raw_averages_and_not_where_the_corner_is_erased():
    import torch

    from fed.attacks import add_marker, context_detection

    x = torch.randn(3000, 1, 12, 12, generator=torch.Generator().manual_seed(0))
    marked = add_marker(x[:5], 3)
    assert torch.equal(marked[:, :, 3:, :], x[:5, :, 3:, :]) and (marked[:, :, :3, :3] == x[:5].amax()).all()
    sizes = [20, 200]
    seen = context_detection(lambda v: v, x, sizes, torch.Generator().manual_seed(1), marker=3, group=10, test=100)
    erased = context_detection(
        lambda v: v[:, :, 3:, :], x, sizes, torch.Generator().manual_seed(1), marker=3, group=10, test=100
    )
    assert seen[200] > 0.95  # averages of 10 marked images still carry the square
    assert erased[200] < 0.7  # a representation without the corner leaves the attacker at chance
    with pytest.raises(ValueError, match="need 3000"):
        context_detection(lambda v: v, x[:100], [200], torch.Generator(), group=10, test=100)


def test_the_context_figure_attacks_fedmix_averages_once_and_each_flea_cell(synthetic_root, tmp_path):

    kind = FIGURE_KINDS["context_attack"]
    fig = {"preset": "p", "datasets": ["synthetic"], "partitions": ["qua3"], "methods": ["flea", "flea_l1_1"]}
    fig |= {"seeds": [0], "sizes": [10, 40], "test": 60, "mean_batch": 5, "labels": {"flea": "FLea (λ2 = 3)"}}
    cells = kind.cells(fig)
    files, data = audionet_cells(cells, tmp_path, synthetic_root)
    kind.draw(fig, cells, files, [], tmp_path / "f.png", tmp_path / "f.csv", "caption", data=data)
    df = pd.read_csv(tmp_path / "f.csv")
    assert sorted(set(df.shared)) == ["FLea (λ2 = 3)", "FedMix averages of 5", "flea_l1_1 features"]
    assert len(df) == 3 * 2 and df.accuracy.between(0, 1).all()


def test_caption_names_each_preset_and_a_figures_own_zsdg_budget():
    from fed.reporting.figures import figure_caption

    presets = {
        "fedzda": {"note": "ZSDG for training: 10 per class, 50 iterations"},
        "quick": {"reduction": "12 rounds"},
    }
    fig3 = {"title": "Fig. 3", "output": "fedzda/fig3", "zsdg": {"per_class": 64, "iterations": 200}}
    assert figure_caption(fig3, presets) == (
        "Fig. 3 — fedzda: paper setting (ZSDG for training: 10 per class, 50 iterations); quick: 12 rounds; "
        "ZSDG for this figure: 64 images per class, 200 iterations, lr 0.1"
    )
    assert figure_caption({"output": "fedzda/fig5"}, {"fedzda": {}}) == "fedzda/fig5 — fedzda: paper setting"


def test_the_readme_heat_map_is_drawn_from_committed_cells(tmp_path):
    """README's second picture (docs/img/headtohead_gain.png) is the pipeline's heat map of the committed head-to-head
    (reference/headtohead_cpu), drawn without training, methods under their display names. To refresh the picture:
    FEDREPRO_PICTURES=1 python -m pytest tests/test_figures.py -k readme_heat_map."""
    import os
    import shutil

    from conftest import REPO, snakemake

    target = "reports/figures/headtohead/gain_global_acc.png"
    configs = [str(REPO / "config/headtohead.yaml"), str(REPO / "config/headtohead_cpu.yaml")]
    snakemake(tmp_path, "--cores", "1", target, "--configfile", *configs)
    gains = pd.read_csv(tmp_path / target.replace(".png", ".csv"))
    assert {"FedProx", "Fed-ZDAC", "FedDPMS", "FLea"} <= set(gains.label)  # not the config's h2h_ keys
    feddata = gains[(gains.label == "FedData") & (gains.regime == "all regimes")].iloc[0]
    assert round(feddata["diff"], 2) == 12.0 and feddata["pairs"] == 18  # the committed board's pooled gain
    assert not (tmp_path / "results").exists()  # nothing trained
    if os.environ.get("FEDREPRO_PICTURES"):
        shutil.copyfile(tmp_path / target, REPO / "docs/img/headtohead_gain.png")


def test_accuracy_curves_keep_a_method_s_colour_in_every_panel_and_count_its_diverged_seeds(monkeypatch, tmp_path):
    """A method whose seeds all diverged in one panel (DA-FL's 2-Label FedMix λ = 0.2) has no curve there, yet the
    methods after it keep their colours; a diverged seed is left out of its method's mean and counted in its legend."""
    from fed.reporting import figures

    diverged = {("b", "m2", 0), ("b", "m2", 1), ("a", "m3", 1)}
    rows = [
        {"dataset": "d", "partition": p, "method": m, "seed": s, "round": r, "global_acc": 10.0 * r + s}
        | {"diverged": (p, m, s) in diverged}
        for p in ("a", "b")
        for m in ("m1", "m2", "m3")
        for s in (0, 1)
        for r in (1, 2)
    ]
    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda fig, out: drawn.setdefault("fig", fig))
    figures.plot_accuracy_curves(pd.DataFrame(rows), tmp_path / "f.png", "t")
    panels = {
        ax.get_title(): {line.get_label(): (line.get_color(), list(line.get_ydata())) for line in ax.lines}
        for ax in drawn["fig"].axes
    }
    assert panels["d, a"] == {
        "m1": ("C0", [10.5, 20.5]),
        "m2": ("C1", [10.5, 20.5]),
        "m3 (1 diverged)": ("C2", [10, 20]),
    }
    assert panels["d, b"] == {"m1": ("C0", [10.5, 20.5]), "m2 (2 diverged)": ("C1", []), "m3": ("C2", [10.5, 20.5])}


def test_accuracy_curves_of_a_seed_study_draw_each_seed_and_the_paper_s_number(monkeypatch, tmp_path):
    """per_seed and paper_table (DA-FL's seed studies): a line per seed, each its own colour, with its own values;
    DA-FL Table 3's number of each panel and method drawn across it, black, each method's in its own dash — the
    method's own number, or the one the paper gives for every partition (centralized); a table the paper lacks fails
    in cells()."""
    from fed.reporting import figures

    kind = FIGURE_KINDS["accuracy_curves"]
    fig = dict(
        output="t/fig", paper="dafl", preset="p", datasets=["fmnist"], partitions=["1-label", "dir0.05"],
        methods=["scaffold", "centralized"], seeds=[0, 2], per_seed=True, paper_table="Table 3",
    )  # fmt: skip
    cells = kind.cells(fig)
    files = []
    for c in cells:
        path = tmp_path / f"{c['partition']}-{c['method']}-{c['seed']}.json"
        curve = [{"round": r, "global_acc": 10.0 * r + c["seed"]} for r in (1, 2)]
        path.write_text(json.dumps(record("last", curve)))
        files.append((path, None))
    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda f, out: drawn.setdefault("fig", f))
    kind.draw(fig, cells, files, [], tmp_path / "f.png", tmp_path / "f.csv", "caption")
    panels = {
        ax.get_title(): {line.get_label(): (line.get_color(), list(line.get_ydata())) for line in ax.lines}
        for ax in drawn["fig"].axes
    }
    assert panels["fmnist, 1-label"] == {
        "scaffold, seed 0": ("C0", [10.0, 20.0]),
        "scaffold, seed 2": ("C1", [12.0, 22.0]),
        "scaffold: paper (10)": ("k", [10.0, 10.0]),  # Table 3, FMNIST 1-Label
        "centralized, seed 0": ("C2", [10.0, 20.0]),
        "centralized, seed 2": ("C3", [12.0, 22.0]),
        "centralized: paper (90.15)": ("k", [90.15, 90.15]),  # one number for every partition
    }
    assert panels["fmnist, dir0.05"]["scaffold: paper (75.38)"] == ("k", [75.38, 75.38])
    dashes = {line.get_label(): line.get_linestyle() for line in drawn["fig"].axes[0].lines}
    assert (dashes["scaffold: paper (10)"], dashes["centralized: paper (90.15)"]) == ("--", ":")
    df = pd.read_csv(tmp_path / "f.csv")
    assert df.set_index(["partition", "method"]).paper_value.groupby(level=[0, 1]).first().to_dict() == {
        ("1-label", "centralized"): 90.15, ("1-label", "scaffold"): 10.0,
        ("dir0.05", "centralized"): 90.15, ("dir0.05", "scaffold"): 75.38,
    }  # fmt: skip
    with pytest.raises(ValueError, match="has no global_acc in table 'no such table'"):
        kind.cells({**fig, "paper_table": "no such table"})


def test_metric_vs_x_keeps_a_line_s_colour_in_every_dataset_panel(monkeypatch, tmp_path):
    """A line absent from one dataset's panel does not pass its colour on to the next line there."""
    from fed.reporting import figures

    rows = [
        {"dataset": d, "x": x, "line": line, "seed": 0, "global_acc": 50.0 + x, "diverged": False}
        for d, lines in (("d1", ("l1", "l2", "l3")), ("d2", ("l1", "l3")))
        for line in lines
        for x in (1, 10)
    ]
    drawn = {}
    monkeypatch.setattr(figures, "_save", lambda fig, out: drawn.setdefault("fig", fig))
    figures.plot_metric_vs_x(pd.DataFrame(rows), "global_acc", "x", tmp_path / "f.png", "t")
    colours = {
        ax.get_title(): {c.get_label(): c.lines[0].get_color() for c in ax.containers} for ax in drawn["fig"].axes
    }
    assert colours == {"d1": {"l1": "C0", "l2": "C1", "l3": "C2"}, "d2": {"l1": "C0", "l3": "C2"}}
