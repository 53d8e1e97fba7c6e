"""FedDPMS (Chen & Vikalo 2023): the shared mean's sensitivity, the noise against both accountings, the server's
matching, Stage I's loss and local decoders, what a receiver sees, and the preset against the official code
(CityChan/Federated-DPMS @ dd16e44). The whole loop against the code: tests/test_wiring_feddpms.py."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import norm
from torch import nn

from fed.algorithms import build_algorithm, feddpms
from fed.config import FLConfig, MethodSpec, load_yaml, resolve_preset
from fed.data.datasets import load_dataset, load_labels
from fed.data.partition import make_partition
from fed.dpms import (
    abundant_and_scarce,
    class_mean,
    clip_rows,
    code_class_mean,
    epsilon_classical,
    epsilon_exact,
    match_clients,
    noisy_mean_pool,
    sensitivity,
)
from fed.engine import Engine
from fed.models import build_model
from fed.models.vae import vae_modules
from fed.runner import run_cell, run_stage
from fed.stages import Stage
from fed.training import average_states

CFG = FLConfig(
    num_clients=4,
    fraction=1.0,
    rounds=3,
    local_epochs=1,
    batch_size=32,
    lr=1e-3,
    optimizer="adam",
    aggregation="weighted",
    local_test_fraction=0.0,
    model="cnn_dpms_fmnist",
)
DPMS = {"preliminary_rounds": 2, "quota": 20, "max_attempts": 200}
PAPER = load_yaml(Path(__file__).parents[1] / "config/papers/feddpms.yaml")


def test_the_preset_averages_like_the_code_unweighted():
    # sampling.average_weights (l. 121-130) is the plain mean, for every method of the figures (train.py l. 255, 344,
    # 401) and for the decoders (the global decoder is the global model's Decoder after l. 255-256)
    assert resolve_preset(PAPER["presets"], "feddpms")["aggregation"] == "mean"


def test_cifar10_cells_keep_40_percent_of_each_client_like_the_code_s_mini():
    # every CIFAR-10 script of the figures passes --mini 0.4 (scripts/train_cifar10*.sh); FMNIST and CIFAR-100: 1
    for cifar10 in (PAPER["tables"]["feddpms_cifar10"], PAPER["figures"]["feddpms_acc_cifar10"]):
        assert all(PAPER["partitions"][p]["subsample"] == 0.4 for p in cifar10["partitions"])
    for other in ("feddpms_fmnist", "feddpms_cifar100"):
        assert all("subsample" not in PAPER["partitions"].get(p, {}) for p in PAPER["tables"][other]["partitions"])


def test_stage1_loss_is_ce_plus_lambda_mse_and_the_code_s_mean_kld():
    torch.manual_seed(0)
    model = build_model("cnn_dpms_fmnist", 1, 10, 28).eval()
    model.extras = nn.ModuleDict(vae_modules(model, (1, 28, 28))).eval()
    x, y = torch.randn(6, 1, 28, 28), torch.randint(10, (6,))
    losses = {}
    for kld in ("mean", "sum"):
        torch.manual_seed(1)  # the same reparameterisation draws
        losses[kld] = feddpms.vae_loss(model, x, y, 0.05, kld)
    with torch.no_grad():
        h = model.features(x).flatten(1)
        mu, logvar = model.extras["mu"](h), model.extras["logvar"](h)
        torch.manual_seed(1)
        x_hat = model.extras["decoder"](mu + torch.exp(logvar / 2) * torch.randn(mu.shape))
        kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp())
        ce, mse = torch.nn.functional.cross_entropy(model.head(h), y), (x_hat - x).pow(2).sum() / 6
    # Localupdate.py l. 49-52: KLD .mean() over batch × latent dimensions (the reconstruction summed / B)
    assert losses["mean"].item() == pytest.approx((ce + 0.05 * (kl.mean() + mse)).item(), rel=1e-5)
    assert losses["sum"].item() == pytest.approx((ce + 0.05 * (kl.sum() / 6 + mse)).item(), rel=1e-5)
    # the KLD scale is Stage I's identity: the default keeps the stage's key, the option has its own
    assert build_algorithm("feddpms").stages()["warm"].key == "vae_prelim-rounds20-vae_weight0.05"
    assert build_algorithm("feddpms", kld="sum").stages()["warm"].key == "vae_prelim-kldsum-rounds20-vae_weight0.05"


def test_clipping_bounds_the_mean_sensitivity_by_2C_over_n():
    g = torch.Generator().manual_seed(0)
    C, n = 1.5, 40
    z = torch.randn(n, 8, generator=g) * 5  # most rows far outside the ball
    assert (clip_rows(z, C).norm(dim=1) <= C + 1e-6).all()
    inside = torch.randn(3, 8, generator=g) * 0.01
    assert torch.equal(clip_rows(inside, C), inside)  # rows inside the ball are unchanged
    small = torch.tensor([[0.12, 0.16], [3.0, 4.0]])  # norms 0.2 and 5 against C = 0.5 < 1
    assert torch.allclose(clip_rows(small, 0.5), torch.tensor([[0.12, 0.16], [0.3, 0.4]]))
    # mean: scalar (the code's torch.mean(z)): the clipped rows' mean averaged over dimensions, broadcast
    assert torch.allclose(class_mean(small, 0.5, collapse=True), torch.full((2,), (0.12 + 0.3 + 0.16 + 0.4) / 4))
    m = class_mean(z, C)
    bound = sensitivity(C, n)
    for _ in range(200):  # replace, add or remove one sample, adversarially far away
        far = torch.randn(1, 8, generator=g) * 1e3
        k = int(torch.randint(n, (1,), generator=g))
        replaced = torch.cat([z[:k], far, z[k + 1 :]])
        assert (class_mean(replaced, C) - m).norm() <= bound + 1e-6
        assert (class_mean(torch.cat([z, far]), C) - m).norm() <= bound + 1e-6
        assert (class_mean(torch.cat([z[:k], z[k + 1 :]]), C) - class_mean(z, C)).norm() <= sensitivity(C, n - 1)
    # the bound is attained: every row C·e1, one replaced by -C·e1
    e1 = torch.zeros(1, 8)
    e1[0, 0] = 1
    same = (C * e1).repeat(n, 1)
    flipped = torch.cat([same[:-1], -C * e1])
    assert (class_mean(same, C) - class_mean(flipped, C)).norm() == pytest.approx(bound)


def test_a_pool_is_the_donor_s_seeded_draws_cut_at_max_attempts_and_empty_without_draws():
    mean, accept_all = torch.tensor([1.0, -2.0, 0.5]), lambda v: torch.zeros(len(v), dtype=torch.long)
    empty = noisy_mean_pool(mean, 1.0, 0, accept_all, 5, 0, None)  # no draw: an empty pool of the code's length
    assert empty.attempts == 0 and empty.latents.shape == (0, 3)
    # the draws are the donor's seeded stream, mean + std·ε in batches of α (the last one cut to max_attempts)
    pool = noisy_mean_pool(mean, 0.3, 0, accept_all, 4, 50, torch.Generator().manual_seed(8))
    assert torch.equal(pool.latents, mean + 0.3 * torch.randn(4, 3, generator=torch.Generator().manual_seed(8)))
    refused = noisy_mean_pool(mean, 0.3, 0, lambda v: torch.ones(len(v), dtype=torch.long), 30, 50, None)
    assert refused.attempts == 50 and refused.latents.shape == (0, 3)  # 30 + 20 draws, none kept


def test_noise_std_is_sigma_times_sensitivity():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(50, 4, generator=g)
    mean, std = class_mean(z, 1.0), 4.0 * sensitivity(1.0, 50)
    pool = noisy_mean_pool(mean, std, 0, lambda v: torch.zeros(len(v), dtype=torch.long), 20_000, 20_000, g)
    assert pool.attempts == 20_000 and len(pool.latents) == 20_000  # everything accepted
    noise = pool.latents - mean
    assert noise.mean().item() == pytest.approx(0, abs=0.01)
    assert noise.std().item() == pytest.approx(4.0 * 2 * 1.0 / 50, rel=0.02)
    # draws in batches of α (the code's gen_num per iteration), the first α accepted kept
    half = noisy_mean_pool(mean, std, 0, lambda v: torch.arange(len(v)) % 2, 30, 1000, g)
    assert half.attempts == 60 and len(half.latents) == 30


def test_the_code_s_class_mean_is_unclipped_reparameterised_resampled():
    # utils.GenData: z ~ q(z|x) per sample, int(0.1 N) resampled with replacement (N when N <= 20), torch.mean(z)
    mu, logvar = torch.randn(40, 3) * 100, torch.randn(40, 3)  # norms far beyond any clip
    g = torch.Generator().manual_seed(2)
    got = code_class_mean(mu, logvar, torch.Generator().manual_seed(2))
    z = mu + torch.exp(logvar / 2) * torch.randn(40, 3, generator=g)
    expected = z[torch.randint(40, (4,), generator=g)].mean(0)
    assert torch.allclose(got, expected) and got.norm() > 10  # nothing clipped
    scalar = code_class_mean(mu, logvar, torch.Generator().manual_seed(2), collapse=True)
    assert torch.allclose(scalar, expected.mean().expand(3))
    small = torch.randn(7, 3)
    g = torch.Generator().manual_seed(3)
    z = small + torch.randn(7, 3, generator=g)  # logvar 0
    expected = z[torch.randint(7, (7,), generator=g)].mean(0)
    assert torch.allclose(code_class_mean(small, torch.zeros(7, 3), torch.Generator().manual_seed(3)), expected)
    for n, picks in ((20, 20), (21, 2)):  # the boundary: N <= 20 resamples N draws, else int(0.1 N)
        rows, g = torch.randn(n, 3), torch.Generator().manual_seed(n)
        z = rows + torch.randn(n, 3, generator=g)
        expected = z[torch.randint(n, (picks,), generator=g)].mean(0)
        assert torch.allclose(code_class_mean(rows, torch.zeros(n, 3), torch.Generator().manual_seed(n)), expected)


def test_the_code_s_noise_is_an_absolute_std_and_its_ledger_has_no_epsilon(dpms_run, synthetic_root, accept_all):
    tmp, part = dpms_run
    run = engine(synthetic_root, part, stages={"warm": tmp / "stage1.pt"}, params={**DPMS, "noise": "code"})
    run.run()
    shared = run.ctx.ledger
    assert shared["noise_std"] == 4.0 and shared["epsilon_exact"] == "inf"
    assert "clip_norm" not in shared and "epsilon_exact_per_release" not in shared
    z, _ = next(v for v in run.algorithm._received.values() if len(v[1]) >= 10)
    # the kept draws of one class (every draw kept): spread by the absolute σ = 4, not σ·2C/N
    assert z[:10].std(0).mean() > 2


def test_epsilon_by_the_slides_formula_and_by_the_exact_accountant():
    # the slides' Definition 2 solved for ε: σ = 4, δ = 0.01 give ε = √(2 ln 125)/4 ≈ 0.777, not the slides' 0.5
    eps = epsilon_classical(4.0, 0.01)
    assert eps == pytest.approx(math.sqrt(2 * math.log(125)) / 4) and eps == pytest.approx(0.7769, abs=1e-4)
    assert math.sqrt(2 * math.log(5 / (4 * 0.01))) / eps == pytest.approx(4.0)  # back to σ

    # exact: the analytic Gaussian mechanism (Balle & Wang 2018, Thm. 8) at the PLD accountant's ε gives δ
    def delta_of(eps, sigma):
        return norm.cdf(1 / (2 * sigma) - eps * sigma) - math.exp(eps) * norm.cdf(-1 / (2 * sigma) - eps * sigma)

    exact = epsilon_exact(4.0, 0.01)
    assert delta_of(exact, 4.0) == pytest.approx(0.01, rel=1e-6) and exact == pytest.approx(0.36, abs=0.01)
    assert exact < 0.5 < eps  # the slides' ε = 0.5 holds under the exact accounting, not under their own formula
    # k releases of the same mean: one Gaussian with σ/√k
    k = 50
    composed = epsilon_exact(4.0, 0.01, k)
    assert delta_of(composed, 4.0 / math.sqrt(k)) == pytest.approx(0.01, rel=1e-6) and composed > exact
    assert epsilon_exact(4.0, 0.01, 0) == 0.0  # nothing released
    # δ(ε = 0) = 2Φ(1/(2σ)) − 1 ≈ 4e-4 < δ at σ = 1000: the mechanism is (0, δ)-DP
    assert delta_of(0.0, 1000.0) < 0.01 and epsilon_exact(1000.0, 0.01) == 0.0


def test_abundant_scarce_classes_and_matching_by_hand():
    counts = np.array([50, 0, 3, 20, 7])
    assert abundant_and_scarce(counts, 2) == ([0, 3], [1, 2])
    assert abundant_and_scarce(np.array([0, 5, 0]), 2) == ([1], [0, 2])  # an empty class is never abundant
    assert abundant_and_scarce(np.array([1, 0, 0]), 2) == ([0], [1, 2])  # one sample is enough
    assert match_clients([[0]], [[1]]) == [None]  # a federation of one client has no donor
    # ties as the code's counts.argsort()[::-1]: the higher class id is the more abundant, the lower the scarcer
    assert abundant_and_scarce(np.array([4, 4, 4, 1, 1]), 2) == ([2, 1], [3, 4])
    abundant = [[0, 1], [2, 3], [0, 2], [4, 5]]
    scarce = [[2, 3], [0, 1], [4, 5], [9, 8]]
    # 0 needs {2,3}: client 1 has both; 1 needs {0,1}: client 0 has both (2 has only 0); 2 needs {4,5}: client 3;
    # nobody is abundant in 8 or 9
    assert match_clients(abundant, scarce) == [1, 0, 3, None]
    assert match_clients([[0], [0]], [[0], [0]]) == [1, 0]  # never oneself
    # the code's np.argmax(L2D[i]) over every client: oneself allowed, the first on a tie, a donor without overlap
    assert match_clients(abundant, scarce, code_rule=True) == [1, 0, 3, 0]
    assert match_clients([[0], [0]], [[0], [0]], code_rule=True) == [0, 0]


@pytest.fixture(scope="module")
def dpms_run(synthetic_root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dpms")
    part = tmp / "part.json"
    part.write_text(
        json.dumps(make_partition(load_labels("synthetic", synthetic_root), "dirichlet", 4, 0, 0.0, beta=0.3))
    )
    stage = Stage.of("vae_prelim", rounds=2, vae_weight=0.05)
    run_stage(stage, CFG, "synthetic", synthetic_root, part, 0, tmp / "stage1.pt", tmp / "stage_work", progress=None)
    return tmp, part


def engine(root, part, stages=None, params=DPMS, rounds=3, work_dir=None):
    return Engine(
        FLConfig(**{**CFG.to_dict(), "rounds": rounds}),
        build_algorithm("feddpms", **params),
        load_dataset("synthetic", root, "train"),
        load_dataset("synthetic", root, "test"),
        json.loads(part.read_text()),
        0,
        work_dir=work_dir,
        progress=None,
        stages=stages,
    )


def decoder_keys(state):
    return [k for k in state if k.startswith("extras.decoder.")]


def test_decoders_stay_local_until_the_upload_round_then_average(dpms_run, synthetic_root):
    tmp, part = dpms_run
    run = engine(synthetic_root, part, rounds=2, work_dir=tmp / "local")
    initial = {k: v.clone() for k, v in run.global_state.items()}
    run.run()
    record = torch.load(tmp / "stage1.pt", weights_only=False)
    assert record["stage"] == Stage.of("vae_prelim", rounds=2, vae_weight=0.05).key and record["round"] == 2
    # the stage's checkpoint is this very run's end (same settings, seed and streams)
    for k in record["global_state"]:
        assert torch.equal(record["global_state"][k], run.global_state[k].cpu()), k  # stage files load to the CPU
    ctx = run.ctx
    round1 = [ctx.clients.load(k, 2)["decoder"] for k in range(4)]  # each client's decoder after round 1
    round2 = [ctx.clients.load(k, 3)["decoder"] for k in range(4)]
    assert not torch.equal(round1[0]["dense.weight"], round1[1]["dense.weight"])  # trained locally, apart
    assert not torch.equal(round2[0]["dense.weight"], round1[0]["dense.weight"])  # round 2 continued round 1's
    weights = [float(n) for n in ctx.client_sizes()]
    mean = average_states([{f"extras.decoder.{k}": v for k, v in d.items()} for d in round2], weights)
    for k in decoder_keys(run.global_state):  # the upload round: D̄ is the weighted mean of every client's decoder
        assert torch.allclose(run.global_state[k].float().cpu(), mean[k].float().cpu(), atol=1e-6), k
        assert not torch.equal(run.global_state[k], initial[k]) or "num_batches" in k
    run1 = engine(synthetic_root, part, rounds=1)
    run1.run()
    for k in decoder_keys(run1.global_state):  # before the upload round the global decoder is not updated
        assert torch.equal(run1.global_state[k], initial[k]), k


def test_after_matching_every_client_deletes_its_decoder(dpms_run, synthetic_root, accept_all):
    _, part = dpms_run
    run = engine(synthetic_root, part, rounds=DPMS["preliminary_rounds"] + 1)  # Stage I inline, then Stage II
    run.run()
    assert run.algorithm._received is not None  # Stage II ran
    for k in range(CFG.num_clients):  # every client uploaded its D_i at round P, so each had one until matching
        assert run.ctx.clients.load(k, before_round=run.ctx.round + 1) == {}  # what any later round would load


def test_a_receiver_gets_noisy_latents_decoded_by_the_global_decoder_never_data_or_a_decoder(
    dpms_run, synthetic_root, accept_all
):
    tmp, part = dpms_run
    run = engine(synthetic_root, part, stages={"warm": tmp / "stage1.pt"}, params={**DPMS, "quota": 50})
    run.run()
    algo, ctx = run.algorithm, run.ctx
    assert ctx.round == 3 and run.history[0]["round"] == 1  # continued from Stage I's round 2, its history kept
    code = ctx.global_state["extras.mu.weight"].shape[0]
    decoder = ctx.global_model().extras["decoder"]
    received = [i for i, (z, y) in algo._received.items() if len(y)]
    assert received, "no receiver got anything; the test would prove nothing"
    for i, (z, y) in algo._received.items():
        assert z.shape == (len(y), code) and y.dtype == torch.long  # latents and labels: all a receiver is sent
        x_own, y_own = ctx.client_data(i)
        x_all, y_all = algo.training_data(ctx, i)
        assert len(y_all) == len(y_own) + len(y) and torch.equal(y_all[len(y_own) :].cpu(), y.cpu())
        assert torch.equal(x_all[: len(y_own)], x_own)  # its own data, then only what D̄ decodes from z̃
        if len(y):
            with torch.no_grad():
                assert torch.allclose(x_all[len(y_own) :], decoder(z))  # D̄(z̃): the global decoder, no other
    # global decoder after Stage II = Stage I's: decoders are not trained or re-averaged any more
    stage1 = torch.load(tmp / "stage1.pt", weights_only=False)["global_state"]
    for k in decoder_keys(stage1):
        assert torch.equal(stage1[k], ctx.global_state[k].cpu()), k


def test_what_receivers_got_survives_a_checkpoint(dpms_run, synthetic_root, accept_all, tmp_path):
    """A run resumed after Stage II trains on the same synthetic data, without sharing again: the received latents
    travel in the engine's checkpoint (``weights_only``), and the decoded data are rebuilt from them."""
    from fed import checkpoint

    tmp, part = dpms_run
    run = engine(synthetic_root, part, stages={"warm": tmp / "stage1.pt"})
    run.run()
    algo, ctx = run.algorithm, run.ctx
    assert any(len(y) for _, y in algo._received.values()), "no receiver got anything; the test would prove nothing"
    checkpoint.save(tmp_path / "ckpt.pt", {"algorithm": algo.state_dict()})
    resumed = build_algorithm("feddpms", **DPMS)
    resumed.load_state_dict(checkpoint.load(tmp_path / "ckpt.pt", "cpu", print)["algorithm"])
    assert resumed._received.keys() == algo._received.keys()
    for i in range(CFG.num_clients):
        for a, b in zip(resumed.training_data(ctx, i), algo.training_data(ctx, i)):
            assert torch.equal(a, b), f"client {i}"
    resumed.share = None  # Stage II is not run again: a resumed client trains on what it received
    assert resumed.client_update(ctx, 0).num_samples == len(algo.training_data(ctx, 0)[1])


def test_send_classes_all_forwards_every_abundant_class_of_the_code_s_donor(dpms_run, synthetic_root, accept_all):
    tmp, part = dpms_run
    labels = load_labels("synthetic", synthetic_root)
    roles = [
        abundant_and_scarce(np.bincount(labels[c["train"]], minlength=10), 3)
        for c in json.loads(part.read_text())["clients"]
    ]
    abundant, scarce = [r[0] for r in roles], [r[1] for r in roles]
    got = {}
    for send in ("needed", "all"):
        run = engine(synthetic_root, part, stages={"warm": tmp / "stage1.pt"}, params={**DPMS, "send_classes": send})
        run.run()
        got[send] = {i: sorted(set(y.tolist())) for i, (_, y) in run.algorithm._received.items()}
        donors = run.history[2]["dpms_donor"]
        for i, j in enumerate(donors):
            if send == "all":  # train.py l. 307-310: GenData over every Major_classes[argmax_j L2D[i, j]]
                assert j == match_clients(abundant, scarce, code_rule=True)[i] and got[send][i] == sorted(abundant[j])
            else:  # the slides: "the corresponding means" — only the classes the receiver is scarce in
                assert got[send][i] == sorted(set(scarce[i]) & set(abundant[j] if j >= 0 else []))
    assert got["needed"] != got["all"]


def test_the_slides_and_the_code_match_a_receiver_no_donor_can_help_differently(synthetic_root, tmp_path, accept_all):
    """Client 3 is scarce in classes 7–9, which no client holds: the slides' rule gives it no donor and nothing, the
    code's ``np.argmax`` over an all-zero row gives it client 0 and all of client 0's abundant classes. The others
    match alike under both rules (a client's own abundant classes are never its scarce ones here)."""
    labels = load_labels("synthetic", synthetic_root)
    pool = {c: list(np.flatnonzero(labels == c)) for c in range(10)}
    held = [{0: 20, 1: 20, 2: 20}, {3: 20, 4: 20, 5: 20}, {0: 20, 3: 20, 6: 20}, {c: 5 for c in range(7)}]
    clients = [{"train": [int(pool[c].pop()) for c, n in h.items() for _ in range(n)], "test": []} for h in held]
    part = tmp_path / "part.json"
    part.write_text(json.dumps({"num_clients": 4, "num_classes": 10, "clients": clients}))
    scarce_of = [[3, 4, 5], [0, 1, 2], [1, 2, 4], [7, 8, 9]]
    abundant_of = [[2, 1, 0], [5, 4, 3], [6, 3, 0], [6, 5, 4]]
    expected = {  # receiver: (donor, classes received)
        "needed": [(1, [3, 4, 5]), (0, [0, 1, 2]), (0, [1, 2]), (-1, [])],
        "all": [(1, [3, 4, 5]), (0, [0, 1, 2]), (0, [0, 1, 2]), (0, [0, 1, 2])],
    }
    for send, want in expected.items():
        run = engine(synthetic_root, part, rounds=DPMS["preliminary_rounds"] + 1, params={**DPMS, "send_classes": send})
        run.run()
        row = run.history[-1]
        got = [(j, sorted(set(run.algorithm._received[i][1].tolist()))) for i, j in enumerate(row["dpms_donor"])]
        assert got == want, send
        code = run.ctx.global_state["extras.mu.weight"].shape[0]
        for z, y in run.algorithm._received.values():  # the empty share too: (0, code) latents, long labels
            assert z.shape == (len(y), code) and z.dtype == torch.float32 and y.dtype == torch.long
        assert row["dpms_received"] == [len(run.algorithm._received[i][1]) for i in range(4)]
        assert row["dpms_uploaded"] == [DPMS["quota"] * len(a) for a in abundant_of]  # accept_all: α per class
    assert [abundant_and_scarce(np.bincount(labels[c["train"]], minlength=10), 3) for c in clients] == list(
        zip(abundant_of, scarce_of)
    )


def test_the_ledger_reports_what_left_and_both_epsilons(dpms_run, synthetic_root):
    tmp, part = dpms_run
    spec = MethodSpec("feddpms", "feddpms", DPMS)
    out = run_cell(
        CFG, spec, "synthetic", synthetic_root, part, 0, tmp / "cell", stages={"warm": tmp / "stage1.pt"}, progress=None
    )
    shared = out["shared"]
    assert shared["decoders"] == 4 and shared["class_roles_to_server"] == 4
    assert shared["noisy_latent_means"] == sum(out["history"][2]["dpms_uploaded"])
    assert shared["noise_multiplier"] == 4.0  # σ (FedDPMS' default), beside the ε it gives
    assert shared["epsilon_classical_per_release"] == pytest.approx(epsilon_classical(4.0, 0.01))
    assert shared["epsilon_exact_per_release"] == pytest.approx(epsilon_exact(4.0, 0.01))
    assert shared["epsilon_exact"] == pytest.approx(epsilon_exact(4.0, 0.01, shared["releases_per_class_max"]))
    assert 0 < shared["releases_per_class_max"] <= DPMS["max_attempts"] and shared["delta"] == 0.01
    assert "raw_samples" not in shared
    # the largest sensitivity 2C / N_i^c is that of the smallest abundant class of any donor
    parts = json.loads(part.read_text())["clients"]
    labels = load_labels("synthetic", synthetic_root)
    smallest = min(
        int(counts[c])
        for k in range(CFG.num_clients)
        for counts in [np.bincount(labels[parts[k]["train"]], minlength=10)]
        for c in abundant_and_scarce(counts, 3)[0]
    )
    assert shared["sensitivity_max"] == pytest.approx(2 * shared["clip_norm"] / smallest)


def test_the_samples_figure_decodes_the_shared_noisy_means_with_the_global_decoder(
    dpms_run, synthetic_root, accept_all
):
    from fed.reporting.figure_kinds.dpms_samples import decode_examples

    tmp, part = dpms_run

    spec = MethodSpec("feddpms", "feddpms", DPMS)
    out = tmp / "cell_samples"
    run_cell(CFG, spec, "synthetic", synthetic_root, part, 0, out, stages={"warm": tmp / "stage1.pt"}, progress=None)
    x, labels, record = decode_examples(out / "metrics.json", out / "model.pt")
    examples = record["history"][2]["dpms_examples"]
    assert sorted(set(labels.tolist())) == sorted(int(c) for c in examples)
    assert all(1 <= len(v) <= 8 for v in examples.values()) and len(labels) == sum(map(len, examples.values()))
    assert x.shape == (len(labels), 1, 28, 28) and 0 <= x.min() and x.max() <= 1
    # the same latents through Stage I's global decoder D̄ (the stage file, not the cell's model.pt) agree
    decoder = vae_modules(build_model("cnn_dpms_fmnist", 1, 10, 28), (1, 28, 28))["decoder"]
    stage1 = torch.load(tmp / "stage1.pt", weights_only=False)["global_state"]
    decoder.load_state_dict({k.removeprefix("extras.decoder."): v for k, v in stage1.items() if "decoder." in k})
    z = torch.tensor([v for c in sorted(examples, key=int) for v in examples[c]])
    with torch.no_grad():
        again = (decoder.eval()(z) * 0.25 + 0.5).clamp(0, 1)  # the synthetic data's mean 0.5, std 0.25
    assert torch.allclose(x, again, atol=1e-6)


def test_warm_start_refuses_a_checkpoint_of_another_stage(dpms_run, synthetic_root):
    tmp, part = dpms_run
    other = engine(synthetic_root, part, stages={"warm": tmp / "stage1.pt"}, params={**DPMS, "preliminary_rounds": 1})
    with pytest.raises(ValueError, match="vae_prelim-rounds1"):
        other.run()


def test_a_method_s_protocol_trains_its_stage_i_and_its_cell_with_its_own_optimiser(synthetic_root, tmp_path):
    """``protocol:`` (the head-to-head's FedDPMS: its authors' Adam under an SGD preset): Stage I and the cell train
    with it, the cell records it, and a cell without it refuses that Stage I (other trajectory settings)."""
    part = tmp_path / "part.json"
    part.write_text(
        json.dumps(make_partition(load_labels("synthetic", synthetic_root), "dirichlet", 4, 0, 0.0, beta=0.3))
    )
    sgd = FLConfig(**{**CFG.to_dict(), "optimizer": "sgd", "lr": 0.05, "momentum": 0.5, "batch_size": 8})
    protocol = {"optimizer": "adam", "lr": 2e-3, "batch_size": 16}
    stage = Stage.of("vae_prelim", rounds=2, vae_weight=0.05).with_protocol(protocol)
    assert stage.key == "vae_prelim-fl_batch_size16-fl_lr0.002-fl_optimizeradam-rounds2-vae_weight0.05"
    run_stage(stage, sgd, "synthetic", synthetic_root, part, 0, tmp_path / "s1.pt", tmp_path / "w", progress=None)
    stage1 = torch.load(tmp_path / "s1.pt", weights_only=False)
    assert stage1["stage"] == Stage.of("vae_prelim", rounds=2, vae_weight=0.05).key  # what FedDPMS declares
    # the same two rounds by an engine on the preset with the protocol's values written in by hand
    adam = FLConfig(**{**sgd.to_dict(), "optimizer": "adam", "lr": 2e-3, "batch_size": 16, "rounds": 2})
    direct = Engine(
        adam,
        build_algorithm("feddpms", preliminary_rounds=2),
        load_dataset("synthetic", synthetic_root, "train"),
        load_dataset("synthetic", synthetic_root, "test"),
        json.loads(part.read_text()),
        0,
        work_dir=tmp_path / "direct",
        progress=None,
    )
    direct.run()
    for k, v in stage1["global_state"].items():
        assert torch.equal(v, direct.global_state[k].cpu()), k
    spec = MethodSpec("feddpms", "feddpms", DPMS, protocol=protocol)
    warm = {"warm": tmp_path / "s1.pt"}
    out = run_cell(sgd, spec, "synthetic", synthetic_root, part, 0, tmp_path / "c", stages=warm, progress=None)
    record = json.loads((tmp_path / "c/metrics.json").read_text())
    assert {k: record["config"][k] for k in protocol} == protocol and record["config"]["momentum"] == 0.5
    assert record["method"]["protocol"] == protocol and out["history"][-1]["round"] == 3
    with pytest.raises(ValueError, match="other settings"):  # the preset's SGD cannot continue an Adam Stage I
        run_cell(
            sgd,
            MethodSpec("feddpms", "feddpms", DPMS),
            "synthetic",
            synthetic_root,
            part,
            0,
            tmp_path / "c2",
            stages=warm,
            progress=None,
        )


def test_feddpms_rejects_a_model_without_a_vae_trunk_and_bad_settings():
    with pytest.raises(ValueError, match="VAE trunk"):
        Engine(
            FLConfig(**{**CFG.to_dict(), "model": "cnn_mnist"}),
            build_algorithm("feddpms"),
            *[load_dataset_stub() for _ in range(2)],
            {"clients": [{"train": [0], "test": []}]},
            0,
            progress=None,
        )
    for bad, message in (
        ({"mean": "median"}, "mean must be one of"),
        ({"noise_multiplier": 0}, "need noise_multiplier > 0 and 0 < delta < 1"),
        ({"delta": 0.0}, "0 < delta < 1, got 4.0, 0.0"),
        ({"delta": 1.0}, "0 < delta < 1, got 4.0, 1.0"),
        ({"preliminary_rounds": 0}, "preliminary_rounds"),
        ({"clip_norm": -1.0}, "clip_norm must be > 0"),
        ({"clip_norm": 0.0}, "clip_norm must be > 0"),
        ({"kld": "max"}, "kld must be one of"),
        ({"noise": "laplace"}, "noise must be one of"),
        ({"send_classes": "some"}, "send_classes must be one of"),
    ):
        with pytest.raises(ValueError, match=f"^FedDPMS: .*{message}"):
            build_algorithm("feddpms", **bad)
    assert build_algorithm("feddpms", noise_multiplier=0.5, delta=1e-5).noise_multiplier == 0.5  # σ < 1 is valid


def load_dataset_stub():
    from fed.data.datasets import TensorDataset

    return TensorDataset(torch.zeros(2, 1, 28, 28), torch.zeros(2, dtype=torch.long), 10)


def test_the_leakage_audit_decodes_every_uploaded_latent_and_charges_it_to_its_donor(
    dpms_run, synthetic_root, accept_all
):
    from fed.leakage import audit, closer_to_train

    tmp, _ = dpms_run  # its partition keeps no held-out records; the audit reads only Stage I's model
    part = tmp / "part_held_out.json"
    labels = load_labels("synthetic", synthetic_root)
    part.write_text(json.dumps(make_partition(labels, "dirichlet", 4, 0, 0.3, beta=0.3)))
    run = engine(synthetic_root, part, stages={"warm": tmp / "stage1.pt"})  # send_classes: needed
    out = audit(run, run.global_state, {"per_class": 1, "iterations": 2})["artifacts"]
    ctx, dpms = run.ctx, run.algorithm
    uploaded = [len(z) for z in dpms._uploaded.values()]
    assert sum(uploaded) == ctx.ledger["noisy_latent_means"] == sum(ctx.round_metrics["dpms_uploaded"])
    for i, j in enumerate(ctx.round_metrics["dpms_donor"]):  # what a receiver gets is some of its donor's uploads
        z, y = dpms._received[i]
        for c in y.unique().tolist():
            assert torch.equal(z[y == c], dpms._uploaded[j, c])
    received = sum(len(y) for _, y in dpms._received.values())
    decoder, x = ctx.global_model().extras["decoder"], ctx.train_set.x
    hits = []
    for (j, _), z in dpms._uploaded.items():  # every donor's pool of every abundant class, against its own records
        if len(z) and len(ctx.test_idx[j]):  # a donor without held-out records is not tested
            with torch.no_grad():
                hits.append(closer_to_train(decoder(z), x[ctx.train_idx[j]], x[ctx.test_idx[j]]))
    hits = torch.cat(hits)
    decoded = out["decoded_latent_means"]
    assert decoded["n"] == sum(uploaded) > received  # the server sees more than any receiver decodes
    assert decoded["n"] >= decoded["audited"] == len(hits) > 0
    assert decoded["closer_to_train"] == pytest.approx(float(hits.mean()))


def code_probe():
    """scripts/feddpms_code_probe.py as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "feddpms_code_probe", Path(__file__).parents[1] / "scripts/feddpms_code_probe.py"
    )
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    return probe


def test_the_code_probe_normalises_each_of_dataparallel_s_chunks_and_keeps_the_first_s_statistics():
    """scripts/feddpms_code_probe.py's BatchNorm (the authors' nn.DataParallel over 4 GPUs): in training each quarter of
    the batch is normalised by its own mean and variance, the running statistics come from the first quarter alone
    (momentum 0.1, unbiased variance), evaluation is plain BatchNorm; the FedDPMS CNN keeps its state_dict."""
    probe = code_probe()
    bn = probe.with_chunked_batch_norm(nn.Sequential(nn.BatchNorm2d(1)), 4)[0]
    with torch.no_grad():
        bn.weight.fill_(2.0), bn.bias.fill_(0.5)
    x = torch.tensor([1.0, 3.0, 0.0, 4.0, 5.0, 5.5, -1.0, 1.0]).view(8, 1, 1, 1)  # chunks of 2
    out = bn.train()(x).flatten()
    spread = [1.0, 2.0, 0.25, 1.0]  # each chunk's half-range: its biased std
    expected = [0.5 + 2 * s * v / math.sqrt(v**2 + bn.eps) for v in spread for s in (-1, 1)]
    torch.testing.assert_close(out, torch.tensor(expected))  # the whole batch's statistics would give other values
    torch.testing.assert_close(bn.running_mean, torch.tensor([0.1 * 2.0]))  # chunk (1, 3): mean 2
    torch.testing.assert_close(bn.running_var, torch.tensor([0.9 + 0.1 * 2.0]))  # its unbiased variance 2
    plain = nn.BatchNorm2d(1).eval()
    plain.load_state_dict(bn.state_dict())
    torch.testing.assert_close(bn.eval()(x), plain(x))
    model = probe.with_chunked_batch_norm(build_model("cnn_dpms_fmnist", 1, 10, 28), 4)
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms and all(isinstance(m, probe.ChunkedBatchNorm2d) and m.devices == 4 for m in norms)
    assert model.state_dict().keys() == build_model("cnn_dpms_fmnist", 1, 10, 28).state_dict().keys()


def test_the_code_probe_s_bootstrap_resamples_each_client_s_own_data_with_replacement():
    """--bootstrap (the scripts' --mini 1): each client keeps its size, draws only its own indices, with replacement
    (≈ 1 − 1/e ≈ 63.2 % distinct of a large client: without replacement all would be, a resample of the whole
    dataset would leak other clients' samples), its test split and the partition's fields untouched."""
    partition = {
        "scheme": "dirichlet",
        "num_clients": 2,
        "clients": [{"train": list(range(10_000)), "test": [-1]}, {"train": [7, 8, 9], "test": []}],
    }
    resampled = code_probe().bootstrap(partition, seed=3)
    big, small = resampled["clients"]
    assert (len(big["train"]), len(small["train"])) == (10_000, 3)
    assert set(small["train"]) <= {7, 8, 9} and set(big["train"]) <= set(range(10_000))
    assert abs(len(set(big["train"])) / 10_000 - (1 - math.exp(-1))) < 0.015  # its standard deviation ≈ 0.003
    assert (big["test"], small["test"], resampled["scheme"], resampled["bootstrap"]) == ([-1], [], "dirichlet", 3)
    assert partition["clients"][0]["train"] == list(range(10_000))  # the input is not changed
    assert code_probe().bootstrap(partition, seed=3) == resampled  # a seed gives one resample


def test_the_code_probe_s_authors_data_deals_every_sample_once_and_resamples_within_each_client():
    """--authors-data (sampling.py's partition_data_FMNIST, then train.py's --mini 1 draw from the same NumPy stream):
    the clients' parts deal every training sample exactly once, each holds >= 10, each client's draw takes as many
    samples as its part holds, from its part alone and with repeats; the seed fixes both."""
    labels = np.repeat(np.arange(10), 30)
    parts, draws = code_probe().authors_data(labels, n_users=4, alpha=0.5, seed=2)
    assert sorted(i for part in parts for i in part) == list(range(300))
    assert min(map(len, parts)) >= 10
    assert [len(d) for d in draws] == [len(part) for part in parts]
    assert all(set(d) <= set(part) for d, part in zip(draws, parts))
    assert sum(len(set(d)) for d in draws) < 300  # with replacement: some samples repeat, others are left out
    assert code_probe().authors_data(labels, n_users=4, alpha=0.5, seed=2) == (parts, draws)


def test_the_code_probe_s_double_logits_give_float64_logits_from_the_float32_network():
    """--double-logits (Localupdate.py: p = model(X).double()): the logits, hence the loss, are float64; the weights
    stay float32 and get their gradient through the cast."""
    model = code_probe().with_double_logits(build_model("cnn_dpms_fmnist", 1, 10, 28))
    logits = model(torch.randn(3, 1, 28, 28, generator=torch.Generator().manual_seed(0)))
    assert logits.dtype == torch.float64 and logits.shape == (3, 10)
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 4, 9])).backward()
    weights = list(model.parameters())
    assert all(p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32 for p in weights)
