"""ZSDG, Fed-ZDAC, Fed-ZDAS and the warm start of start-round runs."""

import copy
import json
import math

import pytest
import torch

from fed.algorithms import build_algorithm
from fed.config import FLConfig
from fed.data.datasets import load_dataset, load_labels
from fed.data.partition import make_partition
from fed.engine import Engine
from fed.models import build_model
from fed.zsdg import ZSDGConfig, zsdg

SMALL = dict(num_clients=10, fraction=0.3, rounds=3, local_epochs=1, batch_size=20, eval_every=1)
FAST_ZSDG = {"per_class": 4, "iterations": 20, "lr": 0.1}


@pytest.fixture(scope="module")
def data(synthetic_root):
    part = make_partition(load_labels("synthetic", synthetic_root), "multimodal", 10, seed=0)
    return load_dataset("synthetic", synthetic_root, "train"), load_dataset("synthetic", synthetic_root, "test"), part


def engine(data, algo, params=None, seed=0, work_dir=None, stages=None, **overrides):
    train, test, part = data
    return Engine(
        FLConfig(**(SMALL | overrides)),
        build_algorithm(algo, **(params or {})),
        train,
        test,
        part,
        seed,
        progress=None,
        work_dir=work_dir,
        stages=stages,
    )


@pytest.fixture(scope="module")
def trained(data):
    """A model trained centrally on the synthetic data (the 'source' model of ZSDG)."""
    e = engine(data, "centralized", rounds=3, local_epochs=2)
    e.run()
    assert e.history[-1]["global_acc"] > 60
    return e.model


def test_zsdg_loss_falls_and_samples_carry_their_class(trained):
    trained.zero_grad(set_to_none=True)
    before = {k: v.clone() for k, v in trained.state_dict().items()}
    x, y, info = zsdg(
        trained, 10, (1, 28, 28), ZSDGConfig(per_class=8, iterations=60), torch.Generator().manual_seed(0)
    )
    assert x.shape == (80, 1, 28, 28) and torch.bincount(y).tolist() == [8] * 10
    assert info["loss_last"] < 0.5 * info["loss_first"]
    assert info["source_acc"] > 80  # chance is 10 %
    assert all(torch.equal(before[k], v) for k, v in trained.state_dict().items()), "ZSDG must not touch the model"
    assert all(p.requires_grad for p in trained.parameters())
    # fixed during the inversion: no gradient lands on the model (a later step that does not zero it would apply it)
    assert all(p.grad is None for p in trained.parameters())


def test_zsdg_needs_batchnorm():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    with pytest.raises(ValueError, match="ZSDG needs a model with BatchNorm layers; Sequential has none"):
        zsdg(model, 10, (1, 28, 28), ZSDGConfig(), torch.Generator())
    with pytest.raises(TypeError, match="unknown ZSDG options \\['steps'\\]"):
        build_algorithm("fedzdac", zsdg={"steps": 3})
    with pytest.raises(ValueError, match="ZSDG optimizer must be 'adam' or 'sgd', got 'sdg'"):
        build_algorithm("fedzdas", zsdg={"optimizer": "sdg"})


@pytest.mark.parametrize("algo", ["fedzdac", "fedzdas"])
def test_zda_runs_generate_and_differ_from_fedavg(data, algo):
    res = engine(data, algo, {"zsdg": FAST_ZSDG}).run()
    fedavg = engine(data, "fedavg").run()
    row = res["history"][-1]
    clients = 3  # fraction 0.3 of 10
    assert row["synthetic_samples"] == clients * 4 * 10 and row["zsdg_calls"] == clients
    assert row["zsdg_seconds"] > 0 and 0 <= row["zsdg_source_acc"] <= 100
    assert (
        res["last"]["global_acc"] != fedavg["last"]["global_acc"]
        or res["history"][0]["train_loss"] != fedavg["history"][0]["train_loss"]
    )
    if algo == "fedzdas":
        assert "server_loss" in row


@pytest.mark.parametrize("algo", ["fedzdac", "fedzdas"])
def test_before_start_round_it_is_fedavg(data, algo):
    late = engine(data, algo, {"start_round": 3, "zsdg": FAST_ZSDG}).run()
    fedavg = engine(data, "fedavg").run()
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(late["history"][:2]) == strip(fedavg["history"][:2])
    assert "synthetic_samples" in late["history"][2] and "synthetic_samples" not in late["history"][1]


def test_warm_start_equals_training_the_prefix(data, tmp_path):
    """A run with start_round=3 that warm-starts from FedAvg's round-2 checkpoint ends with the same numbers
    and weights as the same run that trains rounds 1-2 itself."""
    params = {"start_round": 3, "zsdg": FAST_ZSDG}
    prefix = engine(data, "fedavg", rounds=2, work_dir=tmp_path / "prefix")
    prefix.run()
    ckpt = tmp_path / "prefix" / "checkpoint.pt"
    warm = engine(data, "fedzdac", params, rounds=4, stages={"warm": ckpt})
    warm_res = warm.run()
    straight = engine(data, "fedzdac", params, rounds=4)
    straight_res = straight.run()
    untimed = lambda row: json.dumps({k: v for k, v in row.items() if not k.endswith("seconds")})  # noqa: E731
    assert untimed(warm_res["last"]) == untimed(straight_res["last"])
    assert all(torch.equal(warm.global_state[k], straight.global_state[k]) for k in straight.global_state)
    assert [r["train_loss"] for r in warm_res["history"]] == [r["train_loss"] for r in straight_res["history"]]

    too_late = engine(data, "fedzdac", {"start_round": 2}, rounds=4, stages={"warm": ckpt})
    with pytest.raises(ValueError, match="does not precede"):
        too_late.run()
    other_seed = engine(data, "fedzdac", params, seed=1, rounds=4, stages={"warm": ckpt})
    with pytest.raises(ValueError, match="other settings, seed, partition, data or code"):
        other_seed.run()


def test_resnet_small_image_stem_keeps_resolution_and_can_be_inverted():
    model = build_model("resnet18", 1, 10, 28)
    assert model.net.conv1.kernel_size == (3, 3) and model.net.conv1.stride == (1, 1)
    assert isinstance(model.net.maxpool, torch.nn.Identity)  # CIFAR stem: no early downsampling
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    x, y, info = zsdg(model, 10, (1, 28, 28), ZSDGConfig(per_class=1, iterations=3), torch.Generator().manual_seed(0))
    assert x.shape == (10, 1, 28, 28) and info["loss_last"] < info["loss_first"]


def test_fig3_counts_a_diverged_source_instead_of_crashing(tmp_path):
    """Issue 8: Fig. 3 read per_class_acc of a diverged source (KeyError); divergence is a result."""
    from fed.reporting.zsdg_figures import class_accuracy_table

    model = build_model("cnn_mnist", 1, 10, 28)
    torch.save(model.state_dict(), tmp_path / "model.pt")

    def record(name, diverged):
        last = {"global_acc": None} if diverged else {"per_class_acc": [50.0] * 10}
        path = tmp_path / f"{name}.json"
        path.write_text(
            json.dumps({"dataset": "synthetic", "config": {"model": "cnn_mnist"}, "diverged": diverged, "last": last})
        )
        return path, tmp_path / "model.pt"

    oracle = tmp_path / "oracle.pt"  # what a centralized_model stage writes
    torch.save(
        {
            "state": model.state_dict(),
            "model": "cnn_mnist",
            "dataset": "synthetic",
            "diverged": False,
            "last": {"global_acc": 90.0},
        },
        oracle,
    )
    ok, bad = record("ok", False), record("bad", True)
    df = class_accuracy_table(
        [("synthetic", 0, ok, oracle), ("synthetic", 1, bad, oracle)], {"per_class": 1, "iterations": 1}
    )
    assert len(df) == 10 and (df.seeds == 1).all() and (df.diverged_seeds == 1).all()
    assert (df.model_acc == 50.0).all()


def test_a_diverged_prefix_is_a_result_downstream(data, tmp_path):
    """Issue 8: a diverged FedAvg prefix used to exit without its checkpoint (the prefix rule crashed). Now it
    writes one, and a start-round run continuing from it is recorded as diverged."""
    prefix = engine(data, "fedavg", rounds=2, lr=1e12, work_dir=tmp_path / "prefix")
    assert prefix.run()["diverged"]
    ckpt = tmp_path / "prefix" / "checkpoint.pt"
    assert ckpt.exists()
    late = engine(data, "fedzdac", {"start_round": 3, "zsdg": FAST_ZSDG}, rounds=4, lr=1e12, stages={"warm": ckpt})
    result = late.run()
    assert result["diverged"] and result["diverged_round"] <= 2 and math.isnan(result["last"]["global_acc"])


def test_fedzdas_keeps_the_real_bn_statistics_of_the_aggregate(data):
    """Server training on generated images must not overwrite the aggregated model's BN running statistics
    (option; the old behaviour is keep_bn_statistics=False)."""
    from fed.rounds import run_round

    def after_one_round(keep):
        e = engine(data, "fedzdas", {"zsdg": FAST_ZSDG, "keep_bn_statistics": keep}, rounds=1)
        captured = {}
        original = e.algorithm.server_update

        def spy(ctx, model, results):
            captured["aggregate"] = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
            original(ctx, model, results)

        e.algorithm.server_update = spy
        e.algorithm.setup(e.ctx)
        run_round(e.ctx, e.algorithm)
        return captured["aggregate"], {k: v for k, v in e.global_state.items() if "running" in k}

    aggregate, kept = after_one_round(True)
    assert all(torch.equal(aggregate[k], kept[k]) for k in aggregate)
    aggregate, overwritten = after_one_round(False)
    assert not all(torch.equal(aggregate[k], overwritten[k]) for k in aggregate)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_batched_zsdg_matches_separate_generation(trained, optimizer):
    """Fed-ZDAC's clients invert the same model: optimising their batches together gives each one the images it
    would get alone, at a fraction of the cost. Equal in exact arithmetic; in floats, convolution kernels round
    differently by batch size. SGD carries that rounding as it is (1e-4). Adam divides by √v: a pixel whose gradient
    is ~0 can take a full step either way, so a few pixels differ (seen on a 16-core CPU and on an H100); Adam is held
    to its loss and to the mean pixel difference."""
    from fed.zsdg import zsdg_batched

    model = copy.deepcopy(trained).cpu()
    cfg = ZSDGConfig(per_class=3, iterations=15, optimizer=optimizer, lr=0.1 if optimizer == "adam" else 1.0)
    seeds = [11, 12, 13]
    together = zsdg_batched(model, 10, (1, 28, 28), cfg, [torch.Generator().manual_seed(s) for s in seeds])
    for s, (x, y, info) in zip(seeds, together):
        x1, y1, info1 = zsdg(model, 10, (1, 28, 28), cfg, torch.Generator().manual_seed(s))
        assert torch.equal(y, y1)
        if optimizer == "sgd":
            assert torch.allclose(x, x1, atol=1e-4, rtol=1e-4)
        else:
            assert (x - x1).abs().mean() < 1e-3 * x.abs().mean()
        assert info["loss_last"] == pytest.approx(info1["loss_last"], rel=1e-4 if optimizer == "sgd" else 1e-2)
        assert s == seeds[0] or not torch.allclose(x, together[0][0], atol=0.1)  # each batch its own images


def test_fedzdac_batched_run_equals_client_by_client(data):
    params = {"zsdg": FAST_ZSDG}
    batched = engine(data, "fedzdac", params | {"batch_clients": True}).run()
    separate = engine(data, "fedzdac", params).run()
    for a, b in zip(batched["history"], separate["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=5e-3)  # Adam-amplified rounding: see above
        assert a["zsdg_calls"] == b["zsdg_calls"] == 3


def test_zsdg_objective_is_eq3_at_the_first_iteration(trained):
    """Eq. 3 by hand at the starting noise: BN-input statistics from torch.var_mean (biased) against the running
    statistics, plus the cross-entropy; ZSDG's first recorded loss is that number."""
    from fed.zsdg import channel_moments

    model = copy.deepcopy(trained).eval()
    device = next(model.parameters()).device  # the fixture trains on CUDA where there is one (device: auto)
    x0 = torch.randn((20, 1, 28, 28), generator=torch.Generator().manual_seed(5)).to(device)
    inputs = []
    handles = [
        m.register_forward_hook(lambda m, i, o: inputs.append((m, i[0])))
        for m in model.modules()
        if isinstance(m, torch.nn.BatchNorm2d)
    ]
    with torch.no_grad():
        ce = torch.nn.functional.cross_entropy(model(x0), torch.arange(10, device=device).repeat_interleave(2))
    for h in handles:
        h.remove()
    expected = float(ce)
    for bn, z in inputs:
        var, mean = torch.var_mean(z, dim=(0, 2, 3), unbiased=False)
        expected += float((mean - bn.running_mean).pow(2).sum())
        expected += float(((var + bn.eps).sqrt() - (bn.running_var + bn.eps).sqrt()).pow(2).sum())
    _, _, info = zsdg(model, 10, (1, 28, 28), ZSDGConfig(per_class=2, iterations=1), torch.Generator().manual_seed(5))
    assert len(inputs) == 2 and info["loss_first"] == pytest.approx(expected, rel=1e-5)
    # grouped: each group's moments are its own batch's
    z = torch.randn(3, 7, 4, 5, 5).contiguous(memory_format=torch.channels_last_3d)
    mean, var = channel_moments(z)
    ref_var, ref_mean = torch.var_mean(z, dim=(1, 3, 4), unbiased=False)
    assert mean.shape == var.shape == (3, 4)
    assert torch.allclose(mean, ref_mean, atol=1e-6) and torch.allclose(var, ref_var, atol=1e-6)


def test_fedzdac_batches_clients_on_a_gpu_only_by_default():
    from types import SimpleNamespace

    on = {d: SimpleNamespace(device=torch.device(d)) for d in ("cpu", "cuda")}
    auto = build_algorithm("fedzdac")
    assert (auto.batching(on["cpu"]), auto.batching(on["cuda"])) == (False, True)
    assert build_algorithm("fedzdac", batch_clients=True).batching(on["cpu"])
    assert not build_algorithm("fedzdac", batch_clients=False).batching(on["cuda"])
    with pytest.raises(ValueError, match="batch_clients must be true, false or 'auto', got 'yes'"):
        build_algorithm("fedzdac", batch_clients="yes")


@pytest.mark.parametrize("algo", ["fedzdac", "fedzdas"])
def test_start_round_s_warm_start_is_fedavg_s_first_start_round_minus_1_rounds(algo):
    """Rounds 1 … start_round − 1 are FedAvg (Sec. 4.6): the run continues from the shared FedAvg prefix of exactly
    those rounds; from round 1 there is no prefix."""
    from fed.stages import Stage

    assert build_algorithm(algo, start_round=1).stages() == {} == build_algorithm(algo).stages()  # default: round 1
    with pytest.raises(ValueError, match="start_round must be >= 1, got 0"):
        build_algorithm(algo, start_round=0)
    assert build_algorithm(algo, start_round=2).stages() == {"warm": Stage.of("fedavg_prefix", rounds=1)}
    assert build_algorithm(algo, start_round=80).stages() == {"warm": Stage.of("fedavg_prefix", rounds=79)}


def test_generate_reports_the_mean_source_accuracy_over_every_zsdg_batch_of_the_round(monkeypatch):
    """zsdg_source_acc is the running mean over the round's batches, also across calls: (10 + 40 + 70) / 3;
    zsdg_seconds the sum of the calls' times: (103 − 100) + (112 − 110)."""
    from types import SimpleNamespace

    import fed.algorithms.fedzda as fedzda

    accs = iter([10.0, 40.0, 70.0])
    fake = lambda m, c, s, cfg, gens, d, f: [  # noqa: E731
        (torch.zeros(2, 1), torch.zeros(2, dtype=torch.long), {"source_acc": next(accs)}) for _ in gens
    ]
    monkeypatch.setattr(fedzda, "zsdg_batched", fake)
    clock = iter([100.0, 103.0, 110.0, 112.0])
    monkeypatch.setattr(fedzda.time, "perf_counter", lambda: next(clock))
    ctx = SimpleNamespace(
        round=4, num_classes=2, input_shape=(1,), device=torch.device("cpu"), memory_format=torch.contiguous_format,
        round_metrics={}, rng=lambda *key: torch.Generator(),
    )  # fmt: skip
    algo = build_algorithm("fedzdac")
    assert len(algo.generate(ctx, None, [3, 5])) == 2 and len(algo.generate(ctx, None, [7])) == 1
    m = ctx.round_metrics
    assert m["zsdg_source_acc"] == pytest.approx(40.0) and m["zsdg_calls"] == 3 and m["synthetic_samples"] == 6
    assert m["zsdg_seconds"] == 5.0


@pytest.mark.parametrize("batch_clients", [True, False])
def test_fedzdac_inverts_the_round_s_clients_in_one_pass_only_when_batching(data, monkeypatch, batch_clients):
    """batch_clients: one ZSDG pass per round over every sampled client's batch; else one pass per client."""
    import fed.algorithms.fedzda as fedzda

    passes, real = [], fedzda.zsdg_batched
    monkeypatch.setattr(fedzda, "zsdg_batched", lambda *a, **k: passes.append(len(a[4])) or real(*a, **k))
    engine(data, "fedzdac", {"zsdg": {"per_class": 1, "iterations": 1}, "batch_clients": batch_clients}, rounds=1).run()
    assert passes == ([3] if batch_clients else [1, 1, 1])


def test_total_variation_by_hand():
    """DeepInversion's prior (``tv_weight``): mean |vertical difference| + mean |horizontal difference|.
    [[1, 2, 4], [0, 3, 9], [5, 5, 5]]: vertical |−1|, 1, 5, 5, 2, |−4| → 18/6; horizontal 1, 2, 3, 6, 0, 0 → 12/6."""
    from fed.zsdg import total_variation

    x = torch.tensor([[1.0, 2.0, 4.0], [0.0, 3.0, 9.0], [5.0, 5.0, 5.0]])
    assert float(total_variation(x[None, None])) == 3.0 + 2.0


def deepinversion_reference(model, g, cfg: ZSDGConfig, num_classes=3, shape=(1, 4, 4)):
    """ZSDG with DeepInversion's extras, transcribed: per iteration one random shift (dx, dy) ∈ [−J, J]² of the
    batch (drawn after the starting noise, from the same stream), Eq. 3 on the shifted batch with its weights,
    plus the TV prior on the unshifted images; Adam or plain SGD on the inputs only."""
    from torch import nn

    model = copy.deepcopy(model).eval().requires_grad_(False)
    bn = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    z = {}
    hooks = [m.register_forward_hook(lambda m, i, o: z.__setitem__(m, i[0])) for m in bn]
    y = torch.arange(num_classes).repeat_interleave(cfg.per_class)
    x = torch.randn((len(y), *shape), generator=g).requires_grad_(True)
    opt = torch.optim.Adam([x], lr=cfg.lr) if cfg.optimizer == "adam" else torch.optim.SGD([x], lr=cfg.lr)
    losses = []
    for _ in range(cfg.iterations):
        dx, dy = torch.randint(-cfg.jitter, cfg.jitter + 1, (2,), generator=g).tolist()
        ce = torch.nn.functional.cross_entropy(model(torch.roll(x, shifts=(dx, dy), dims=(2, 3))), y)
        stats = 0.0
        for m in bn:
            var, mean = torch.var_mean(z[m], dim=(0, 2, 3), unbiased=False)
            stats = stats + (mean - m.running_mean).pow(2).sum()
            stats = stats + ((var + m.eps).sqrt() - (m.running_var + m.eps).sqrt()).pow(2).sum()
        tv = (x[:, :, 1:, :] - x[:, :, :-1, :]).abs().mean() + (x[:, :, :, 1:] - x[:, :, :, :-1]).abs().mean()
        loss = cfg.bn_weight * stats + cfg.ce_weight * ce + cfg.tv_weight * tv
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    for h in hooks:
        h.remove()
    with torch.no_grad():
        acc = 100.0 * float((model(x).argmax(1) == y).double().mean())
    return x.detach(), y, losses, acc


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_zsdg_with_jitter_tv_and_weights_is_the_transcription(optimizer):
    """Non-default options (jitter 1, TV 0.3, BN weight 0.7, CE weight 1.3, 3 iterations) against the reference."""
    from torch import nn
    from wiring import float64

    with float64():
        torch.manual_seed(3)
        model = nn.Sequential(
            nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(32, 3)
        )
        bn = model[1]
        bn.running_mean, bn.running_var = torch.tensor([0.3, -0.2]), torch.tensor([1.5, 0.6])
        cfg = ZSDGConfig(
            per_class=2, iterations=3, lr=0.05, optimizer=optimizer, bn_weight=0.7, ce_weight=1.3, jitter=1,
            tv_weight=0.3,
        )  # fmt: skip
        x, y, info = zsdg(model, 3, (1, 4, 4), cfg, torch.Generator().manual_seed(11))
        x_ref, y_ref, losses, acc = deepinversion_reference(model, torch.Generator().manual_seed(11), cfg)
    assert torch.equal(y, y_ref) and torch.allclose(x, x_ref, atol=1e-10)
    assert info["loss_first"] == pytest.approx(losses[0], rel=1e-9)
    assert info["loss_last"] == pytest.approx(losses[-1], rel=1e-9) and info["source_acc"] == pytest.approx(acc)


def test_zsdg_with_no_iterations_returns_its_starting_noise_and_no_loss(trained):
    """iterations 0 (an ablation: noise instead of ZSDG): the labelled starting noise, NaN losses, the model's
    accuracy on that noise."""
    x, y, info = zsdg(trained, 10, (1, 28, 28), ZSDGConfig(per_class=1, iterations=0), torch.Generator().manual_seed(4))
    assert torch.equal(x.cpu(), torch.randn((10, 1, 28, 28), generator=torch.Generator().manual_seed(4)))
    assert math.isnan(info["loss_first"]) and math.isnan(info["loss_last"]) and 0 <= info["source_acc"] <= 100
