"""Wiring of DA-FL (Tang et al. 2023): its real hooks and its real PSG against plain transcriptions of the paper —
Algorithm 2 (PSG: Poisson batches, per-sample clipping of ℓ_i's gradient, N(0, σ²c²I), the generator's step, the
ε0 stop with revocation), the accounting of the GAN stage (Opacus' RDP accountant at q = B/|D|), and Algorithm 1's
FL stage (client i trains on D_i ∪ {D̂_j}_{j≠i}, then FedAvg) through ``run_round`` on the tiny problem of
``wiring.py``. There is no public code of DA-FL: the paper is the reference."""

import copy
import io
import json
import math
import re
import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from opacus.accountants import RDPAccountant
from torch.optim.optimizer import register_optimizer_step_pre_hook
from wiring import assert_close, float64, load, params, run_rounds, tiny_context, wiring_mlp

from fed.algorithms import build_algorithm
from fed.config import FLConfig, MethodSpec
from fed.data.datasets import load_dataset
from fed.dpgan import PSGSettings, train_psg
from fed.engine import Engine
from fed.models.cgan import Discriminator, Generator
from fed.runner import run_stage

ROUNDS = 3
N_PAPER, B_PAPER, SIGMA, DELTA = 6000, 256, 0.5, 1e-5  # a client of Table 2's MNIST 1-Label (6,000 samples)
Q_PAPER = B_PAPER / N_PAPER
N_TINY, B_TINY = 375, 16  # 16/375 = 256/6000: a tiny client at the paper's q
RDP_ONE_STEP = 6.118415464723645  # Opacus 1.6.0 RDPAccountant, (σ, q, steps) = (0.5, 256/6000, 1), δ = 1e-5


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus: secure RNG off, full backward hooks
        yield


def opacus_rdp(sigma, q, steps, delta=DELTA):
    accountant = RDPAccountant()
    accountant.history = [(sigma, q, steps)]
    return accountant.get_epsilon(delta)


@contextmanager
def adam_gradients():
    """The gradient every Adam step is given (the discriminator's: clipped, summed, noised, divided by B)."""
    seen = []
    hook = register_optimizer_step_pre_hook(
        lambda opt, args, kwargs: seen.append([p.grad.clone() for g in opt.param_groups for p in g["params"]])
    )
    try:
        yield seen
    finally:
        hook.remove()


# ------------------------------------------------------------------------------------------- Algorithm 2 (PSG)
def algorithm_2(x, y, num_classes, s: PSGSettings, seed, epsilon0):
    """Algorithm 2 as printed, with Table 2's Adam, T = ``s.rounds`` iterations, q = B/|D|; the run's random
    streams (Poisson masks: seed + 1, noise: seed + 2, z: seed + 3) are given, not computed. The discriminator
    ascends ℓ = log D(x) + log(1 − D(x̃)): written here as descending −ℓ with the noise added to Σ ∇(−ℓ_i), the
    same mechanism since N(0, σ²c²I) is symmetric (and the same draw as the run's)."""
    torch.manual_seed(seed)
    G = Generator(num_classes, x.shape[1], s.noise_dim, s.width)
    D = Discriminator(num_classes, x.shape[1], s.width)
    opt_g = torch.optim.Adam(G.parameters(), lr=s.lr, betas=(s.beta1, s.beta2))
    opt_d = torch.optim.Adam(D.parameters(), lr=s.lr, betas=(s.beta1, s.beta2))
    n, B, c = len(y), s.batch_size, s.max_grad_norm
    q, sigma = B / n, (s.noise_multiplier if math.isfinite(epsilon0) else 0.0)
    masks, noise, zs = (torch.Generator().manual_seed(seed + k) for k in (1, 2, 3))
    kept = 0
    for t in range(1, s.rounds + 1):
        before = copy.deepcopy((G.state_dict(), D.state_dict(), opt_g.state_dict(), opt_d.state_dict()))
        idx = (torch.rand(n, generator=masks) < q).nonzero().reshape(-1)  # line 4: each sample with prob. q
        z = torch.randn(len(idx), s.noise_dim, generator=zs)  # line 3
        x_tilde = G(z, y[idx]) if len(idx) else None  # line 6
        total = [torch.zeros_like(p) for p in D.parameters()]
        for i in range(len(idx)):  # lines 5-10
            xi, yi, fi = x[idx[i] : idx[i] + 1], y[idx[i] : idx[i] + 1], x_tilde[i : i + 1].detach()
            ell = F.logsigmoid(D(xi, yi)).sum() + F.logsigmoid(-D(fi, yi)).sum()  # line 7: log D + log(1 − D)
            g = torch.autograd.grad(-ell, list(D.parameters()))  # line 8
            scale = 1 / max(1.0, torch.cat([gi.flatten() for gi in g]).norm().item() / c)  # line 9
            total = [a + scale * gi for a, gi in zip(total, g)]
        for p, a in zip(D.parameters(), total):  # line 11: (Σ g_i + N(0, σ²c²I)) / B
            p.grad = (a + torch.normal(0.0, sigma * c, p.shape, generator=noise)) / B if sigma else a / B
        opt_d.step()  # line 12
        if len(idx):  # an empty Poisson batch: D moves by the noise alone, G has no sample to step on
            D.requires_grad_(False)
            opt_g.zero_grad()
            logit = D(x_tilde, y[idx])  # lines 13-17 through the updated discriminator
            loss = F.logsigmoid(-logit).mean() if s.generator_loss == "saturating" else -F.logsigmoid(logit).mean()
            loss.backward()
            opt_g.step()  # line 18
            D.requires_grad_(True)
        if sigma and opacus_rdp(sigma, q, t, s.delta) >= epsilon0:  # lines 19-20: stop, revoke this step
            G.load_state_dict(before[0])
            break
        kept = t
    return G.state_dict(), kept


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
@pytest.mark.parametrize("generator_loss", ["saturating", "non_saturating"])
@pytest.mark.parametrize("private", [True, False])
def test_psg_is_algorithm_2(generator_loss, private, mode):
    with float64():
        g = torch.Generator().manual_seed(1)
        x, y = torch.rand(48, 1, 32, 32, generator=g) * 2 - 1, torch.randint(0, 3, (48,), generator=g)
        s = PSGSettings(batch_size=12, rounds=4, schedule="iterations", width=4, max_grad_norm=6.0,
                        generator_loss=generator_loss, grad_sample_mode=mode)  # fmt: skip
        q = 12 / 48
        epsilon0 = (opacus_rdp(SIGMA, q, 2) + opacus_rdp(SIGMA, q, 3)) / 2 if private else math.inf
        s = PSGSettings(**{**asdict(s), "epsilon": epsilon0})
        with adam_gradients() as run:
            result = train_psg(x, y, 3, s, seed=7)
        with adam_gradients() as paper:
            expected, kept = algorithm_2(x, y, 3, s, 7, epsilon0)
    assert len(run) == 2 * kept and len(paper) == 2 * (kept + private)  # D then G a step; the revoked one
    # Opacus clips by c / (‖g_i‖ + 1e-6), the paper by c / ‖g_i‖: ~1e-7 of a clipped g_i (‖g_i‖ ≈ 6)
    assert_close(run, paper[: len(run)], "gradients Adam is given", rtol=1e-5, atol=1e-7)
    assert result.steps == kept == (2 if private else 4) and result.stopped_by_budget == private
    assert result.sample_rate == q
    assert_close(result.generator, expected, "generator after Algorithm 2", rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
def test_psg_takes_a_noise_only_step_on_an_empty_poisson_batch(mode):
    """q = 1/8 on 8 samples: step 5 of this seed's Poisson masks is empty. Algorithm 2 still takes the step (the
    accountant counts it, D gets N(0, σ²c²I)/B), G is not stepped, and training goes on to step 6."""
    with float64():
        g = torch.Generator().manual_seed(2)
        x, y = torch.rand(8, 1, 32, 32, generator=g) * 2 - 1, torch.randint(0, 3, (8,), generator=g)
        s = PSGSettings(batch_size=1, rounds=6, schedule="iterations", width=4, epsilon=1e6, grad_sample_mode=mode)
        masks = torch.Generator().manual_seed(1 + 1)  # the run's Poisson stream: seed + 1
        assert [int((torch.rand(8, generator=masks) < 1 / 8).sum()) for _ in range(6)] == [2, 1, 1, 2, 0, 1]
        log = io.StringIO()
        started = time.perf_counter()
        with adam_gradients() as run:
            result = train_psg(x, y, 3, s, seed=1, progress=log)
        elapsed = time.perf_counter() - started
        with adam_gradients() as paper:
            expected, kept = algorithm_2(x, y, 3, s, 1, s.epsilon)
    assert len(run) == len(paper) == 6 + 5  # 6 D steps, 5 G steps
    assert_close(run, paper, "gradients Adam is given", rtol=1e-5, atol=1e-7)
    assert result.steps == kept == 6 and result.epsilon == pytest.approx(opacus_rdp(SIGMA, 1 / 8, 6), abs=1e-9)
    assert_close(result.generator, expected, "generator after Algorithm 2", rtol=1e-6, atol=1e-9)
    assert re.fullmatch(r"  PSG step 6/6 loss_d -?\d+\.\d{3} loss_g -?\d+\.\d{3}\n", log.getvalue())  # the last step
    assert 0 < result.seconds <= elapsed


# ------------------------------------------------------------------------------------ accounting of the stage
def test_one_step_at_the_paper_s_q_costs_opacus_rdp_epsilon():
    """Check 1: Opacus' RDP accountant for the 6,000-sample client, 1 and k steps, is what PSG records for a
    client at the same q = B/|D| (375 samples, B = 16)."""
    assert N_TINY * B_PAPER == N_PAPER * B_TINY and B_TINY / N_TINY == Q_PAPER
    assert opacus_rdp(SIGMA, Q_PAPER, 1) == pytest.approx(RDP_ONE_STEP, abs=1e-9)
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(N_TINY, 1, 32, 32, generator=g) * 2 - 1, torch.randint(0, 3, (N_TINY,), generator=g)
    for k in (1, 3):
        s = PSGSettings(batch_size=B_TINY, rounds=k, schedule="iterations", width=4)
        result = train_psg(x, y, 3, s, seed=0)
        assert result.steps == result.scheduled_steps == k and not result.stopped_by_budget
        assert result.sample_rate == Q_PAPER
        assert result.epsilon == pytest.approx(opacus_rdp(SIGMA, Q_PAPER, k), abs=1e-9)
    # 50 epochs of a 6,000-sample client: ⌈50 · 6000/256⌉ = 1,172 steps scheduled; ε0 = 50 keeps the 834 with ε < 50
    assert opacus_rdp(SIGMA, Q_PAPER, 834) < 50 <= opacus_rdp(SIGMA, Q_PAPER, 835)


def test_the_gan_stage_records_the_steps_and_epsilon_of_each_client(synthetic_root, tmp_path):
    """The ``dp_cgan`` stage through ``run_stage``: client 0 holds 375 samples (q = 256/6000 at B = 16), client 1
    holds 225 (q = 16/225); each record is Opacus' RDP ε of its own (σ, q, steps); the run's ledger takes the
    largest (each client holds its own guarantee) plus ε1."""
    part = tmp_path / "part.json"
    part.write_text(json.dumps({"clients": [{"train": list(range(375)), "test": []},
                                            {"train": list(range(375, 600)), "test": []}]}))  # fmt: skip
    cfg = FLConfig(num_clients=2, fraction=1.0, rounds=1, local_epochs=1, batch_size=16, lr=0.01, model="cnn_dafl")
    gan = {"batch_size": B_TINY, "rounds": 2, "schedule": "iterations", "width": 4, "epsilon": 7.5}
    spec = MethodSpec("dafl", "dafl", {"gamma": 0.05, "pls_epsilon": 2.0, "gan": gan})
    stage = build_algorithm("dafl", **spec.params).stages()["gans"]
    out = tmp_path / "gans.pt"
    run_stage(stage, cfg, "synthetic", synthetic_root, part, 0, out, tmp_path / "w", progress=None)
    record = torch.load(out, weights_only=False)
    clients = record["clients"]
    assert [c["sample_rate"] for c in clients] == [Q_PAPER, 16 / 225]
    assert clients[0]["steps"] == 2 and clients[0]["epsilon"] == pytest.approx(opacus_rdp(SIGMA, Q_PAPER, 2))
    # client 1: one step costs ε ≈ 7.2 at q = 16/225, two ≥ 7.5 = ε0: the second is revoked
    assert opacus_rdp(SIGMA, 16 / 225, 1) < 7.5 <= opacus_rdp(SIGMA, 16 / 225, 2)
    assert clients[1]["steps"] == 1 and clients[1]["stopped_by_budget"]
    assert clients[1]["epsilon"] == pytest.approx(opacus_rdp(SIGMA, 16 / 225, 1))
    engine = Engine(cfg, build_algorithm("dafl", **spec.params), load_dataset("synthetic", synthetic_root, "train"),
                    load_dataset("synthetic", synthetic_root, "test"), json.loads(part.read_text()), 0,
                    stages={"gans": out}, progress=None)  # fmt: skip
    engine.algorithm.setup(engine.ctx)
    ledger = engine.ctx.ledger
    assert ledger["epsilon_gan"] == pytest.approx(max(c["epsilon"] for c in clients))
    assert ledger["epsilon_total"] == pytest.approx(ledger["epsilon_gan"] + 2.0) and ledger["delta"] == DELTA


# ------------------------------------------------------------------------------- Algorithm 1 (the FL stage)
MEAN, STD = [0.4, 0.5, 0.6, 0.5], [0.2, 0.3, 0.25, 0.3]  # the tiny problem's 4 channels


def stub_gan_stage(path, num_clients, num_classes, channels, width=4):
    """A ``dp_cgan`` stage file of untrained generators (what the FL stage reads: generators, ε, steps)."""
    settings = PSGSettings(width=width)
    clients = []
    for k in range(num_clients):
        torch.manual_seed(100 + k)
        G = Generator(num_classes, channels, settings.noise_dim, width)
        clients.append({"generator": G.state_dict(), "steps": k, "epsilon": 10.0 + k, "sample_rate": 0.1})
    record = {"settings": asdict(settings), "channels": channels, "num_classes": num_classes, "mean": MEAN,
              "std": STD, "clients": clients}  # fmt: skip
    torch.save(record, path)
    return record


def pls_transcribed(counts, gamma, epsilon1, rng):
    """Algorithm 3: n̂ = ⌊γn⌋; for each class, n̂_k ∈ {0..n̂} with Pr ∝ exp((ε1/L) u_k(D, r) / (2Δu)), u_k = −|r/n̂ −
    n_k/n|, Δu = 1/n (Eq. 4-5, Theorem 2 with the budget split over the L classes)."""
    n, L = int(counts.sum()), len(counts)
    n_hat = math.floor(gamma * n)
    out = []
    for n_k in counts:
        w = np.exp([(epsilon1 / L) * -abs(r / n_hat - n_k / n) / (2 / n) for r in range(n_hat + 1)])
        out.append(rng.choice(n_hat + 1, p=w / w.sum()))
    return out


def shared_samples(ctx, record, gamma, epsilon1, label_selection):
    """Algorithm 1 lines 1-5 at every client: labels (line 3: ⌊γ|D_i|⌋ drawn from the multiset U_i; or Algorithm 3
    in its place), then x̂_k = G_i(z, ŷ_k) (Algorithm 2 lines 22-26), taken from the GAN's [-1, 1] at 32×32 to the
    data's normalised 1×1."""
    pool = []
    for i in range(ctx.num_clients):
        _, y = ctx.client_data(i)
        rng = ctx.np_rng("labels", i)
        if label_selection == "pls":
            counts = pls_transcribed(np.bincount(y.numpy(), minlength=ctx.num_classes), gamma, epsilon1, rng)
        else:
            u_i = rng.choice(y.numpy(), size=math.floor(gamma * len(y)), replace=False)
            counts = np.bincount(u_i, minlength=ctx.num_classes)
        y_hat = torch.cat([torch.full((int(c),), k) for k, c in enumerate(counts)]).long()
        G = Generator(ctx.num_classes, record["channels"], 10, 4)
        G.load_state_dict(record["clients"][i]["generator"])
        z = torch.randn(len(y_hat), 10, generator=torch.Generator().manual_seed(ctx.seed_int("generate", i)))
        with torch.no_grad():
            img = (G(z, y_hat) + 1) / 2
        img = img[:, :, 15:17, 15:17].mean(dim=(2, 3), keepdim=True)  # bilinear 32 → 1: the centre 2×2's mean
        pool.append(((img - torch.tensor(MEAN).view(1, -1, 1, 1)) / torch.tensor(STD).view(1, -1, 1, 1), y_hat))
    return pool


def algorithm_1_fedavg(ctx, x0, sampled, pool):
    """Algorithm 1 lines 7-13 and the FL stage (plain FedAvg, Sec. 4): client i trains E epochs of SGD (lr,
    momentum, batch B) on D_i ∪ {D̂_j}_{j≠i}; the server takes the mean weighted by the augmented sizes."""
    x = [t.clone() for t in x0]
    cfg = ctx.cfg
    for r, selected in enumerate(sampled, start=1):
        states, sizes = [], []
        for i in selected:
            X, Y = ctx.client_data(i)
            X = torch.cat([X, *(pool[j][0] for j in range(ctx.num_clients) if j != i)])
            Y = torch.cat([Y, *(pool[j][1] for j in range(ctx.num_clients) if j != i)])
            net = load(wiring_mlp(4, 3, 1), x)
            opt = torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=cfg.momentum)
            g = ctx.rng("shuffle", r, i)
            for _ in range(cfg.local_epochs):
                for b in torch.randperm(len(Y), generator=g).split(cfg.batch_size):
                    opt.zero_grad()
                    F.cross_entropy(net(X[b]), Y[b]).backward()
                    opt.step()
            states.append(params(net))
            sizes.append(len(Y))
        x = [sum(s[j] * n / sum(sizes) for s, n in zip(states, sizes)) for j in range(len(x))]
    return x


@pytest.mark.parametrize("label_selection", ["pls", "sample"])
def test_dafl_fl_stage_is_algorithm_1_then_fedavg(monkeypatch, tmp_path, label_selection):
    gamma, epsilon1 = 0.5, 3.0
    with float64():
        ctx = tiny_context(monkeypatch)
        record = stub_gan_stage(tmp_path / "gans.pt", ctx.num_clients, ctx.num_classes, ctx.input_shape[0])
        ctx.stages = {"gans": tmp_path / "gans.pt"}
        x0 = params(ctx.model)
        dafl = build_algorithm("dafl", gamma=gamma, pls_epsilon=epsilon1, label_selection=label_selection)
        sampled = run_rounds(ctx, dafl, ROUNDS)
        pool = shared_samples(ctx, record, gamma, epsilon1, label_selection)
        x = algorithm_1_fedavg(ctx, x0, sampled, pool)
    assert ctx.cfg.momentum > 0 and ctx.cfg.batch_size > 1 and len(set(map(tuple, sampled))) > 1
    assert all(len(y) > 0 for _, y in pool) and len({tuple(y.tolist()) for _, y in pool}) > 1
    for (xs, ys), (xe, ye) in zip(dafl._synthetic, pool):
        assert torch.equal(ys, ye)
        assert_close(xs, xe, "shared samples")
    assert_close(params(ctx.model), x, "global model")
    assert ctx.ledger["synthetic_samples"] == sum(len(y) for _, y in pool)
    assert ctx.ledger["epsilon_gan"] == 10.0 + ctx.num_clients - 1  # the largest of the clients' ε
    assert ctx.ledger["epsilon_labels"] == (epsilon1 if label_selection == "pls" else "inf")


def test_shared_samples_are_put_on_the_run_s_device_and_memory_format(monkeypatch, tmp_path):
    """The generators run on the CPU; ``setup`` moves D̂_j to the device and memory format of the training data.
    The meta device stands for an accelerator (a device other than the CPU, without one; the real samples stay on
    the CPU), 2×2 inputs make the channels-last layout observable (1×1 inputs have the same strides in both)."""
    with float64():
        ctx = tiny_context(monkeypatch)
        stub_gan_stage(tmp_path / "gans.pt", ctx.num_clients, ctx.num_classes, ctx.input_shape[0])
        ctx.stages = {"gans": tmp_path / "gans.pt"}
        ctx.device, ctx.memory_format, ctx.input_shape = torch.device("meta"), torch.channels_last, (4, 2, 2)
        monkeypatch.setattr(ctx, "samples", lambda idx: (ctx.train_set.x[idx], ctx.train_set.y[idx]))  # stay put
        dafl = build_algorithm("dafl", gamma=0.5, label_selection="sample")
        dafl.setup(ctx)
    assert all(len(y) > 0 for _, y in dafl._synthetic)
    for x, y in dafl._synthetic:
        assert x.device.type == y.device.type == "meta" and x.shape[1:] == (4, 2, 2)
        assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
