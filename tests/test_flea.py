"""FLea (Xia et al., KDD 2024): feature mixup, distance correlation, distillation, and the feature buffer's content,
size and age; FLea's models and the per-round learning-rate decay."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from fed.algorithms import LocalContext, build_algorithm
from fed.algorithms.flea import FeatureBatches, batch_dcor, distillation, feature_mixup
from fed.config import FLConfig
from fed.data.datasets import load_dataset, load_labels
from fed.data.partition import make_partition
from fed.engine import Engine
from fed.losses import distance_correlation
from fed.models import build_model

CFG = FLConfig(
    num_clients=8,
    fraction=0.25,
    rounds=3,
    local_epochs=1,
    batch_size=16,
    lr=1e-3,
    optimizer="adam",
    lr_decay=0.98,
    lr_min=1e-5,
    aggregation="weighted",
    local_test_fraction=0.0,
    model="audionet",
    checkpoint_every=1,
)


def reference_dcor(x: np.ndarray, f: np.ndarray) -> float:
    """Székely, Rizzo & Bakirov (2007), Definition 4, by the loops of its formulas (V-statistics)."""
    n = len(x)

    def centred(z):
        d = np.array([[np.linalg.norm(z[i] - z[j]) for j in range(n)] for i in range(n)])
        return d - d.mean(0)[None, :] - d.mean(1)[:, None] + d.mean()

    a, b = centred(x.reshape(n, -1)), centred(f.reshape(n, -1))
    v2xy, v2x, v2y = (a * b).mean(), (a * a).mean(), (b * b).mean()
    return math.sqrt(v2xy / math.sqrt(v2x * v2y))


def test_distance_correlation_matches_the_definition_and_its_known_cases():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, 4, 4, generator=g)
    f = torch.tanh(x.flatten(1)[:, :7] ** 2) + 0.1 * torch.randn(40, 7, generator=g)  # nonlinear, dependent
    r = float(distance_correlation(x, f))  # the code's guards (a diagonal of √1e-7, not 0) move R by ~5e-5 here
    assert r == pytest.approx(reference_dcor(x.numpy(), f.numpy()), abs=2e-4)
    assert float(distance_correlation(x, f, squared=True)) == pytest.approx(r**2, abs=1e-5)
    # a similarity transform (rotation, scaling, shift) of x: exactly 1
    q, _ = torch.linalg.qr(torch.randn(48, 48, generator=g))
    assert float(distance_correlation(x, 3.0 * x.flatten(1) @ q + 5.0)) == pytest.approx(1.0, abs=1e-5)
    # independent samples: R → 0 as n grows (V-statistic bias ~ n^-1/2)
    big_x, big_f = torch.randn(2000, 5, generator=g), torch.randn(2000, 5, generator=g)
    assert float(distance_correlation(big_x, big_f)) < 0.1
    assert float(distance_correlation(x, f)) > 0.5
    # differentiable, also with a repeated row (zero distances)
    feats = torch.cat([f[:5], f[:1]]).requires_grad_(True)
    distance_correlation(torch.cat([x[:5], x[:1]]), feats).backward()
    assert torch.isfinite(feats.grad).all() and feats.grad.abs().sum() > 0


def test_feature_mixup_is_the_convex_combination_with_the_drawn_weights():
    g = torch.Generator().manual_seed(1)
    f, f_buf = torch.randn(6, 2, 3, 3, generator=g), torch.randn(6, 2, 3, 3, generator=g)
    y, y_buf = F.one_hot(torch.arange(6) % 4, 4).float(), F.one_hot(torch.arange(6).flip(0) % 4, 4).float()
    beta = torch.tensor([0.0, 1.0, 0.3, 0.5, 0.9, 0.25])
    f_mix, y_mix = feature_mixup(f, y, f_buf, y_buf, beta)
    for i, b in enumerate(beta.tolist()):
        assert torch.allclose(f_mix[i], b * f[i] + (1 - b) * f_buf[i])
        assert torch.allclose(y_mix[i], b * y[i] + (1 - b) * y_buf[i])
    assert torch.allclose(y_mix.sum(1), torch.ones(6)) and (y_mix >= 0).all()  # still distributions
    assert torch.equal(f_mix[0], f_buf[0]) and torch.equal(f_mix[1], f[1])


def test_distillation_is_the_kl_divergence_in_the_stated_direction():
    s, t = torch.tensor([[1.0, 0.0, -1.0]]), torch.tensor([[0.0, 2.0, 0.0]])
    p_s, p_t = F.softmax(s, 1)[0], F.softmax(t, 1)[0]
    kl_t_s = float((p_t * (p_t / p_s).log()).sum())
    kl_s_t = float((p_s * (p_s / p_t).log()).sum())
    assert float(distillation(s, t, 1.0, reverse=False)) == pytest.approx(kl_t_s, rel=1e-5)
    assert float(distillation(s, t, 1.0, reverse=True)) == pytest.approx(kl_s_t, rel=1e-5)
    assert float(distillation(s, s, 2.0, reverse=False)) == pytest.approx(0.0, abs=1e-7)


@pytest.fixture(scope="module")
def partition(synthetic_root):
    return make_partition(load_labels("synthetic", synthetic_root), "label_quantity", CFG.num_clients, seed=0, k=3)


def flea_engine(root, partition, rounds=3, **params):
    return Engine(
        FLConfig(**{**CFG.to_dict(), "rounds": rounds}),
        build_algorithm("flea", **params),
        load_dataset("synthetic", root, "train"),
        load_dataset("synthetic", root, "test"),
        partition,
        0,
        progress=None,
    )


def test_the_buffer_holds_features_of_the_previous_rounds_clients_only(synthetic_root, partition):
    eng = flea_engine(synthetic_root, partition, rounds=2)
    algo, ctx = eng.algorithm, eng.ctx
    seen = {}
    real_build = algo.build_buffer

    def spy(c):
        seen[c.round] = (list(algo._sources), real_build(c), {k: v.clone() for k, v in c.global_state.items()})
        return seen[c.round][1]

    algo.build_buffer = spy
    eng.run()
    sources1, none, _ = seen[1]
    assert sources1 == [] and none is None  # round 1: empty buffer, no augmentation
    sources, buf, theta2 = seen[2]
    round1 = eng.history[0]
    assert "flea_buffer_size" not in round1 and eng.history[1]["flea_buffer_size"] == len(buf.owner)
    # age and membership: the clients of round 1, extracted after round 1's aggregation, and nobody else
    assert buf.extracted_round == 1 and set(buf.owner.tolist()) == set(sources) and len(sources) == 2
    # size: ⌊α·|D_k|⌋ shared samples per source client, distinct
    sizes = {k: len(ctx.client_data(k)[1]) for k in sources}
    assert len(buf.owner) == sum(math.floor(0.1 * n) for n in sizes.values())  # ⌊α·|D_k|⌋ (the code's int)
    # content: θ(2)[:l] of the shared samples — features with their labels, never the samples
    model = build_model("audionet", 1, 10, 28)
    model.load_state_dict(theta2)
    model.eval()
    for k in sources:
        x, y = ctx.client_data(k)
        idx = algo.shared_indices(ctx, k)
        assert len(set(idx.tolist())) == len(idx)  # "an α fraction of its local data": without replacement
        rows = buf.owner == k
        assert buf.features[rows].shape[1:] == (16, 7, 7) != x.shape[1:]  # block-1 activations, not 1×28×28 inputs
        assert torch.equal(buf.labels[rows].argmax(1), y[idx])
        with torch.no_grad():
            assert torch.allclose(buf.features[rows].cpu(), model.features(x[idx].cpu()), atol=1e-5)
    assert ctx.ledger["features"] == len(buf.owner) and "raw_samples" not in ctx.ledger


def test_exposure_round_one_loss_resume_and_bad_settings(synthetic_root, partition):
    eng = flea_engine(synthetic_root, partition, rounds=3)
    eng.run()
    algo, ctx = eng.algorithm, eng.ctx
    sampled = []
    for r in (1, 2, 3):  # the clients each round sampled (the engine's stream)
        ctx.round = r
        sampled.append(ctx.sample_clients())
    xi = np.zeros((CFG.num_clients, CFG.num_clients), bool)
    for t in (1, 2):  # clients of round t shared with those of round t + 1; ξ is symmetric
        for i in sampled[t - 1]:
            for j in sampled[t]:
                xi[i, j] = xi[j, i] = True
        assert eng.history[t]["flea_exposure"] == pytest.approx(xi.sum() / CFG.num_clients**2)
    assert eng.history[0]["flea_exposure"] == 0.0 and 0 < eng.history[2]["flea_dcor_shared"] <= 1
    assert algo._sources == sampled[2]

    # resume: the method state (sources, ξ) rebuilds the same buffer from the global model
    again = build_algorithm("flea")
    again.load_state_dict(algo.state_dict())
    ctx.round = 4
    a, b = algo.build_buffer(ctx), again.build_buffer(ctx)
    assert torch.equal(a.features, b.features) and torch.equal(a.owner, b.owner) and a.extracted_round == 3

    # no buffer (round 1): Eq. 6 without augmentation, CE + λ1·KL(p_l ‖ p_g)(f̃ = f) + λ2·R²(x, θ[:l](x))
    fresh = build_algorithm("flea", lambda_dcor=2.5, tau=2.0)
    fresh._buffer_round = ctx.round
    model, teacher = ctx.new_model(), ctx.global_model()
    x, y = ctx.client_data(0)
    x, y = x[:16], y[:16]
    feats = model.features(x)
    p_l, p_g = F.softmax(model.head(feats) / 2, 1), F.softmax(teacher.head(feats) / 2, 1)
    kl = 4 * (p_l * (p_l / p_g).log()).sum(1).mean()
    r2 = distance_correlation(x, feats) ** 2
    expected = F.cross_entropy(model.head(feats), y) + kl + 2.5 * r2
    assert fresh.local_loss(model, x, y, None, ctx).item() == pytest.approx(expected.item(), rel=1e-5)

    # with a buffer: Eq. 6 = CE(θ[l:](f̃), ỹ) + λ1·τ²KL(p_l ‖ p_g on f̃) + λ2·R², B^F the next |B| rows of shuffled
    # passes over F(t), then the β draws
    fresh._buffer = buf = algo.build_buffer(ctx)
    rng = np.random.default_rng(7)
    local = LocalContext(0, [], streams={"rng": rng, "batches": FeatureBatches(len(buf.owner), rng, False, 16)})
    ref = np.random.default_rng(7)
    order = np.concatenate([ref.permutation(len(buf.owner)) for _ in range(16 // len(buf.owner) + 1)])
    pick = torch.as_tensor(order[:16], device=feats.device)
    beta = torch.as_tensor(ref.beta(2.0, 2.0, size=16), dtype=torch.float32, device=feats.device)
    f_mix, y_mix = feature_mixup(feats, F.one_hot(y, 10).float(), buf.features[pick], buf.labels[pick], beta)
    ce = -(y_mix * F.log_softmax(model.head(f_mix), 1)).sum(1).mean()
    kd = distillation(model.head(f_mix), teacher.head(f_mix), 2.0, reverse=True)
    expected = ce + 1.0 * kd + 2.5 * r2
    assert fresh.objective(model, local, ctx)(x, y).item() == pytest.approx(expected.item(), rel=1e-5)
    # the code's options: + α1·CE(θ(x), y), τ²KL(p_g ‖ p_l) on the buffer rows, R, α3 = 3 − 0.1·(t − 1) (t = 4)
    code = build_algorithm("flea", lambda_dcor=3.0, tau=2.0, kd="buffer", dcor="root", lambda_ce=0.5,
                           dcor_schedule="code")  # fmt: skip
    code._buffer, code._buffer_round = buf, ctx.round
    rng = np.random.default_rng(7)
    local = LocalContext(0, [], streams={"rng": rng, "batches": FeatureBatches(len(buf.owner), rng, False, 16)})
    kd = distillation(model.head(buf.features[pick]), teacher.head(buf.features[pick]), 2.0, reverse=False)
    ce_local = F.cross_entropy(model.head(feats), y)
    expected = ce + 0.5 * ce_local + kd + 2.7 * distance_correlation(x, feats)
    assert code.objective(model, local, ctx)(x, y).item() == pytest.approx(expected.item(), rel=1e-5)
    assert [code.lambda2(t) for t in (1, 2, 20, 21, 99)] == pytest.approx([3.0, 2.9, 1.1, 1.0, 1.0])

    for bad in (
        {"share_fraction": 0},
        {"beta_a": 0},
        {"kd": "logits"},
        {"dcor": "cubed"},
        {"lambda_dis": -1},
        {"lambda_ce": -1},
        {"warmup": "long"},
        {"dcor_schedule": "cosine"},
        {"feature_batches": "replace"},
    ):
        with pytest.raises(ValueError, match="flea"):
            build_algorithm("flea", **bad)


def test_learning_rate_decays_per_round_to_its_floor(synthetic_root, partition):
    ctx = flea_engine(synthetic_root, partition).ctx
    for r, lr in ((1, 1e-3), (2, 0.98e-3), (11, 1e-3 * 0.98**10), (400, 1e-5)):
        ctx.round = r
        assert ctx.round_lr() == pytest.approx(lr) and ctx.sgd_settings().lr == pytest.approx(lr)


@pytest.mark.parametrize("source,shared", [("gaussian", "class_feature_statistics"), ("features", "features")])
def test_ccvr_recalibrates_only_the_last_linear_layer_on_penultimate_representations(
    synthetic_root, partition, source, shared
):
    """FLea's models cut after block 1; CCVR works before the last linear layer (``embed``), not at the cut."""

    def run(algorithm):
        eng = Engine(
            FLConfig(**{**CFG.to_dict(), "rounds": 1, "optimizer": "sgd", "lr": 0.01}),
            algorithm,
            load_dataset("synthetic", synthetic_root, "train"),
            load_dataset("synthetic", synthetic_root, "test"),
            partition,
            0,
            progress=None,
        )
        eng.run()
        return eng

    ccvr = run(build_algorithm("ccvr", virtual_per_class=4, epochs=1, source=source))
    fedavg = run(build_algorithm("fedavg"))
    last = {f"classifier.{len(ccvr.ctx.model.classifier) - 1}.{p}" for p in ("weight", "bias")}
    for key, value in ccvr.global_state.items():  # FedAvg, then only the last layer moves
        assert torch.equal(value, fedavg.global_state[key]) != (key in last), key
    assert math.isfinite(ccvr.history[0]["ccvr_loss"])
    if source == "features":  # FLea's App. C: the representations of 10 % of every client's samples
        sizes = [len(c["train"]) for c in partition["clients"]]
        assert ccvr.ctx.ledger[shared] == sum(math.floor(0.1 * n) for n in sizes)  # ⌊α|D_k|⌋, FLea's count
    else:
        assert ccvr.ctx.ledger[shared] > 0


def test_the_batch_record_of_figs_7_and_8_is_the_round_s_first_augmented_batch(synthetic_root, partition, tmp_path):
    from fed.reporting.figure_kinds import FIGURE_KINDS

    eng = flea_engine(synthetic_root, partition, rounds=2)
    eng.run()
    row = eng.history[1]
    batch = row["flea_batch"]
    assert "flea_batch" not in eng.history[0]  # round 1 has no buffer, so no augmented batch
    assert len(batch["beta"]) == CFG.batch_size and all(0 < b < 1 for b in batch["beta"])
    assert sum(batch["mixed_classes"]) == pytest.approx(CFG.batch_size, abs=1e-3)  # soft labels: one unit per sample
    local = torch.bincount(eng.ctx.client_data(batch["client"])[1], minlength=10).tolist()
    assert batch["local_classes"] == local and sum(row["flea_buffer_classes"]) == row["flea_buffer_size"]
    record = {"dataset": "synthetic", "history": eng.history}
    (tmp_path / "m.json").write_text(json.dumps(record))
    kind, fig = FIGURE_KINDS["flea_batch"], {"rounds": [2]}
    kind.draw(fig, [], [(tmp_path / "m.json", None)], [], tmp_path / "f.png", tmp_path / "f.csv", "t")
    df = pd.read_csv(tmp_path / "f.csv")
    assert df[df.what == "beta"].value.tolist() == pytest.approx(batch["beta"]) and (tmp_path / "f.png").exists()
    with pytest.raises(ValueError, match="round 1 .* no FLea batch record"):
        kind.draw({"rounds": [1]}, [], [(tmp_path / "m.json", None)], [], tmp_path / "g.png", tmp_path / "g.csv", "t")


def test_fedmix_shares_the_means_of_a_fraction_of_each_client_s_samples(synthetic_root, partition):
    """Fig. 6 (right) needs FedMix at smaller proportions of shared augmentations: ``share_fraction`` averages
    ⌈fraction·|D_k|⌉ random samples of each client in groups of M = 10; at 1, all of them (FedMix)."""

    def shared(**params):
        eng = Engine(
            CFG,
            build_algorithm("fedmix", **params),
            load_dataset("synthetic", synthetic_root, "train"),
            load_dataset("synthetic", synthetic_root, "test"),
            partition,
            0,
            progress=None,
        )
        eng.algorithm.setup(eng.ctx)
        return eng.algorithm, eng.ctx

    for fraction in (1.0, 0.5):
        algo, ctx = shared(share_fraction=fraction)
        averaged = []
        for k in range(CFG.num_clients):
            x, y = ctx.client_data(k)
            n = math.ceil(fraction * len(y))
            rows = algo.owner == k
            group = torch.full((int(rows.sum()),), 10.0, device=x.device)  # groups of M, the last the remainder
            group[-1] = n - 10 * (len(group) - 1)
            assert len(group) == math.ceil(n / 10) and 0 < group[-1] <= 10
            counts = (algo.y_bar[rows] * group[:, None]).sum(0)  # the classes of the samples it averaged
            own = torch.bincount(y, minlength=counts.numel()).float()
            assert counts.sum().item() == pytest.approx(n) and (counts <= own + 1e-4).all()
            total = (algo.x_bar[rows] * group[:, None, None, None]).sum(0)  # the sum of the averaged images
            if fraction == 1:
                assert torch.allclose(counts, own, atol=1e-4) and torch.allclose(total, x.sum(0), atol=1e-3)
            averaged.append(n)
        assert ctx.ledger["mean_batches"] == sum(math.ceil(n / 10) for n in averaged)
    with pytest.raises(ValueError, match="share_fraction"):
        build_algorithm("fedmix", share_fraction=0)


def test_fedgen_option_of_flea_s_description_generates_cut_feature_maps_with_four_transposed_convs(
    synthetic_root, partition
):
    """FLea App. C: "a generator of four ConvTranspose2d layers". ``space: cut, generator: conv`` makes feature maps
    of the cut's exact shape, scored by the rest of the model (``head``); the default stays FedGen's MLP of
    penultimate representations."""
    from fed.algorithms.fedgen import conv_generator

    for shape in [(16, 7, 7), (16, 32, 32), (16, 16, 86)]:
        net = conv_generator(42, shape)
        assert sum(isinstance(m, torch.nn.ConvTranspose2d) for m in net.modules()) == 4
        out = net(torch.zeros(2, 42, 1, 1))
        assert out.shape[:2] == (2, shape[0]) and out.shape[2] >= shape[1] and out.shape[3] >= shape[2]
    with pytest.raises(ValueError, match="feature maps"):
        conv_generator(42, (64,))

    eng = Engine(
        FLConfig(**{**CFG.to_dict(), "rounds": 2}),
        build_algorithm("fedgen", space="cut", generator="conv", generator_steps=3, batch=8),
        load_dataset("synthetic", synthetic_root, "train"),
        load_dataset("synthetic", synthetic_root, "test"),
        partition,
        0,
        progress=None,
    )
    out = eng.run()
    algo, model = eng.algorithm, eng.ctx.global_model()
    _, h = algo.generator(torch.tensor([0, 3, 9], device=eng.ctx.device), torch.Generator().manual_seed(0))
    x = eng.ctx.client_data(0)[0][:3]
    assert h.shape == model.features(x).shape == (3, 16, 7, 7)  # AudioNet's cut after block 1
    assert algo.score(model, h).shape == (3, 10) and not out["diverged"]
    assert all(math.isfinite(r["generator_loss"]) for r in out["history"])
    with pytest.raises(ValueError, match="space"):
        build_algorithm("fedgen", space="pixels")


def test_flea_defaults_and_the_bounds_of_its_settings():
    """The defaults are the paper's (α = 0.1, Beta(2, 2), λ1 = 1, λ2 = 3, τ = 1, Eq. 6 options); the bounds are
    inclusive where the setting allows it (α = 1: every sample; λ = 0: the term off), and each error names its key."""
    flea = build_algorithm("flea")
    assert (flea.share_fraction, flea.beta_a, flea.lambda_dis, flea.lambda_dcor, flea.tau, flea.lambda_ce) == (
        0.1, 2.0, 1.0, 3.0, 1.0, 0.0)  # fmt: skip
    assert (flea.kd, flea.dcor, flea.dcor_schedule, flea.warmup, flea.feature_batches) == (
        "mixed", "squared", "constant", "paper", "equal")  # fmt: skip
    assert not flea.share_replace
    # the code's schedule (λ2 = 3): α3 = 3 − 0.1·(r − 1) while r − 1 < 20, then exactly 1 (``else 1``)
    code = build_algorithm("flea", dcor_schedule="code")
    assert [code.lambda2(t) for t in (20, 21, 22, 500)] == [3.0 * (1 - 19 / 30), 1.0, 1.0, 1.0]
    ok = build_algorithm("flea", share_fraction=1.0, beta_a=0.5, lambda_dis=0.0, lambda_dcor=0.0, lambda_ce=0.0)
    assert (ok.share_fraction, ok.beta_a) == (1.0, 0.5)
    bounds = "^flea: beta_a and tau must be > 0, lambda_dis, lambda_dcor and lambda_ce >= 0$"
    for bad, match in (
        ({"share_fraction": 1.5}, r"^flea: share_fraction must be in \(0, 1\], got 1.5$"),
        ({"share_fraction": 0}, r"^flea: share_fraction must be in \(0, 1\], got 0$"),
        ({"tau": 0}, bounds),
        ({"beta_a": 0}, bounds),
        ({"lambda_dcor": -1}, bounds),
        ({"lambda_dis": -1}, bounds),
        ({"kd": "logits"}, r"^flea: kd must be one of \('mixed', 'buffer'\), got 'logits'$"),
        ({"dcor": "cubed"}, r"^flea: dcor must be one of \('squared', 'root'\), got 'cubed'$"),
        ({"dcor_schedule": "cos"}, r"^flea: dcor_schedule must be one of \('constant', 'code'\), got 'cos'$"),
        ({"warmup": "long"}, r"^flea: warmup must be one of \('paper', 'code'\), got 'long'$"),
        ({"feature_batches": "x"}, r"^flea: feature_batches must be one of \('equal', 'loader'\), got 'x'$"),
    ):
        with pytest.raises(ValueError, match=match):
            build_algorithm("flea", **bad)


def test_flea_s_fedlc_baseline_runs_flea_s_absent_class_rule_in_config_and_committed_cells():
    """FLea's FedLC numbers come from its code, which adds 1e-6 to every class count (XTxiatong/FLea ``myuser.py``
    L187): the reproduction's ``fedlc_flea`` runs that rule (``absent: offset``, not FL-bench's floor), and so does
    every committed cell of it."""
    import yaml

    repo = Path(__file__).resolve().parents[1]
    method = yaml.safe_load((repo / "config/papers/flea.yaml").read_text())["methods"]["fedlc_flea"]
    assert method["algorithm"] == "fedlc" and method["absent"] == "offset"
    cells = sorted((repo / "reference/flea_quick/runs").glob("*/*/*/fedlc_flea/seed*/metrics.json"))
    assert len(cells) == 12
    assert {json.loads(c.read_text())["method"]["params"]["absent"] for c in cells} == {"offset"}


def test_batch_dcor_is_the_authors_printed_rho_and_changes_nothing():
    """R (not R²) of each local batch in training mode (BatchNorm's batch statistics, dropout on), averaged; a batch
    of one sample is left out; BatchNorm's running statistics and torch's random state are as before."""
    from torch import nn

    from fed.models.base import SequentialSplit

    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.Dropout(0.3), nn.Tanh())
    model = SequentialSplit(body, nn.Linear(5, 3)).double().eval()
    x = torch.randn(9, 6, dtype=torch.float64)
    buffers, rng = {k: v.clone() for k, v in model.named_buffers()}, torch.get_rng_state()
    got = batch_dcor(model, x, 4)  # batches of 4, 4 and 1
    assert all(torch.equal(v, buffers[k]) for k, v in model.named_buffers())
    assert torch.equal(torch.get_rng_state(), rng) and not model.training
    model.train()
    with torch.no_grad():
        r = [distance_correlation(b, model.features(b), squared=False) for b in (x[:4], x[4:8])]
    assert got == pytest.approx(float(sum(r)) / 2, rel=1e-12)
    model.eval()
    with torch.no_grad():
        r_eval = [distance_correlation(b, model.features(b)) for b in (x[:4], x[4:8])]
    assert abs(float(sum(r_eval)) / 2 - got) > 1e-3  # training mode is not eval mode here
    assert batch_dcor(model, x, 1) is None
