"""Wiring of the loss-based baselines (MOON, FedMix, NaiveMix, FedNTD, FedLC): their real hooks through
``run_round`` on the tiny problem of ``wiring.py``, against plain transcriptions of the authors' local objectives
(QinbinLi/MOON ``train_net_fedcon``, the FedMix paper's and Flower's NaiveMix/FedMix losses, Lee-Gihun/FedNTD
``NTD_Loss``, FL-bench's ``FedLCClient``) inside the same local SGD loop and the n_k-weighted mean."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from wiring import assert_close, batches, float64, load, params, run_rounds, tiny_context, wiring_mlp

from fed.algorithms import build_algorithm
from fed.algorithms.fedmix import naivemix_loss as naivemix_loss_of_fed
from fed.sharing import share_subset

ROUNDS = 3


def fedavg_rounds(ctx, x0, sampled, local_loss, make_net=lambda: wiring_mlp(4, 3, 1), prepare=None, after_round=None):
    """The rounds around a method's local objective: every sampled client starts from the global model x, runs
    SGD (lr, momentum ρ, fresh optimiser) over ``local_loss(net, xb, yb, r, k)`` on the run's batches; the global
    model is the n_k-weighted mean. ``prepare(r, k, x)`` runs before a client trains (a teacher, a stream),
    ``after_round(trained)`` after each round with {client: its trained parameters}; returns x."""
    lr, momentum = ctx.cfg.lr, ctx.cfg.momentum
    x = [t.clone() for t in x0]
    for r, selected in enumerate(sampled, start=1):
        states, sizes, trained = [], [], {}
        for k in selected:
            net = load(make_net(), x)
            if prepare is not None:
                prepare(r, k, x)
            opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
            X, Y = ctx.client_data(k)
            for b in batches(ctx, r, k):
                opt.zero_grad()
                local_loss(net, X[b], Y[b], r, k).backward()
                opt.step()
            trained[k] = params(net)
            states.append(trained[k])
            sizes.append(len(Y))
        x = [sum(s[j] * n / sum(sizes) for s, n in zip(states, sizes)) for j in range(len(x))]
        if after_round is not None:
            after_round(trained)
    return x


# ---------------------------------------------------------------------------------------------------------- MOON


def moon_net(d):
    """Our MOON model: the classifier reads the backbone's features, the projection head (Linear, ReLU, Linear)
    is a side branch for the contrastive term (docs/deviations.md: MOON's code puts it before the classifier)."""
    net = wiring_mlp(4, 3, 1)
    net.extras = nn.ModuleDict({"projection": nn.Sequential(nn.Linear(5, d), nn.ReLU(), nn.Linear(d, d))})
    return net


def moon_reference(ctx, x0, sampled, mu, tau, d):
    """QinbinLi/MOON ``train_net_fedcon`` with a pool of one previous model per client (``model_buffer_size`` 1):
    z = P(h) of the local model, pro2 of the round's global model (positive), pro3 of the client's model after its
    last local training (negative); ``logits = [cos(z, pro2), cos(z, pro3)] / τ``, loss = CE(out, y) +
    μ·CE(logits, 0). A client without a previous model has no negative (MOON's first round, whose pool is empty):
    its loss is CE only."""
    prev = {}
    frozen = {"global": moon_net(d).eval(), "prev": moon_net(d).eval()}

    def prepare(r, k, x):
        load(frozen["global"], x)
        if k in prev:
            load(frozen["prev"], prev[k])

    def loss(net, xb, yb, r, k):
        h = net.body(xb)
        z = net.extras["projection"](h.flatten(1))
        with torch.no_grad():
            pro2 = frozen["global"].extras["projection"](frozen["global"].body(xb).flatten(1))
            pro3 = frozen["prev"].extras["projection"](frozen["prev"].body(xb).flatten(1))
        logits = F.cosine_similarity(z, pro2, dim=-1).reshape(-1, 1)
        if k in prev:
            logits = torch.cat([logits, F.cosine_similarity(z, pro3, dim=-1).reshape(-1, 1)], dim=1)
        logits = logits / tau
        return F.cross_entropy(net.classifier(h), yb) + mu * F.cross_entropy(logits, torch.zeros(len(yb)).long())

    x = fedavg_rounds(ctx, x0, sampled, loss, lambda: moon_net(d), prepare, after_round=prev.update)
    return x, prev


def test_moon_is_train_net_fedcon_with_a_previous_model_per_client(monkeypatch):
    mu, tau, d = 2.5, 0.7, 6
    with float64():
        moon = build_algorithm("moon", mu=mu, tau=tau, projection_dim=d)
        ctx = tiny_context(monkeypatch, extra_modules=moon.extra_modules)
        x0 = params(ctx.model)
        sampled = run_rounds(ctx, moon, 4)
        x, prev = moon_reference(ctx, x0, sampled, mu, tau, d)
    # clients that return the next round, after a gap (client 1: rounds 1 and 4), and new ones (2 in round 2)
    assert set(sampled[0]) & set(sampled[1]) and set(sampled[1]) - set(sampled[0])
    assert any(k in sampled[0] and k not in sampled[1] + sampled[2] for k in sampled[3])
    assert_close(params(ctx.model), x, "global model (backbone, classifier, projection head)")
    for k in sorted({k for s in sampled for k in s}):
        assert_close(list(ctx.clients.load(k, 5)["prev"].values()), prev[k], f"previous model of {k}")


# ------------------------------------------------------------------------------------------------ FedMix, NaiveMix


def shared_means(ctx, size, fraction=1.0):
    """Every client's averaged data: its samples in the order of its "share" stream, in groups of ``size``, each
    group's mean input and mean one-hot label; with the client that shared each mean. ``fraction`` < 1: only the
    first ceil(fraction·n) (at least one) samples in the order of the client's "share_subset" stream."""
    xs, ys, owner = [], [], []
    for k in range(ctx.num_clients):
        X, Y = ctx.client_data(k)
        if fraction < 1:
            keep = torch.randperm(len(Y), generator=ctx.rng("share_subset", k))[: max(1, math.ceil(fraction * len(Y)))]
            X, Y = X[keep], Y[keep]
        order = torch.randperm(len(Y), generator=ctx.rng("share", k))
        for group in order.split(size):
            xs.append(X[group].mean(0))
            ys.append(torch.eye(ctx.num_classes)[Y[group]].mean(0))
            owner.append(k)
    return torch.stack(xs), torch.stack(ys), torch.tensor(owner)


def mix_rounds(ctx, x0, sampled, size, mixed_loss, fraction=1.0):
    """The rounds of a mean-sharing method: in each batch every local sample is paired with a mean (x̄, ȳ) shared
    by another client, drawn uniformly from the client's "mix" stream of the round; ``mixed_loss(net, x, y, x̄, ȳ,
    gen)`` is the batch's loss."""
    x_bar, y_bar, owner = shared_means(ctx, size, fraction)
    streams = {}

    def prepare(r, k, x):
        streams[k] = ctx.rng("mix", r, k)

    def loss(net, xb, yb, r, k):
        pool = torch.nonzero(owner != k).flatten()
        pick = pool[torch.randint(len(pool), (len(yb),), generator=streams[k])]
        return mixed_loss(net, xb, yb, x_bar[pick], y_bar[pick], streams[k])

    return fedavg_rounds(ctx, x0, sampled, loss, prepare=prepare)


def fedmix_paper_loss(lam):
    """FedMix (Yoon et al., ICLR 2021), the first-order approximation of the global mixup loss, per sample i with
    its mean (x̄_i, ȳ_i): (1 − λ) ℓ(f((1 − λ)x_i), y_i) + λ ℓ(f((1 − λ)x_i), ȳ_i) + λ ⟨∂ℓ(f(u), y_i)/∂u, x̄_i⟩ at the
    model's input u = (1 − λ)x_i (ℓ: cross-entropy, soft for ȳ); mean over the batch."""

    def loss(net, xb, yb, xbar, ybar, gen):
        u = ((1 - lam) * xb).requires_grad_(True)
        out = net(u)
        ce_y = F.cross_entropy(out, yb, reduction="none")
        ce_bar = -(ybar * F.log_softmax(out, dim=1)).sum(1)
        (du,) = torch.autograd.grad(ce_y.sum(), u, create_graph=True)  # row i: ∂ℓ_i/∂u_i (no BN: rows apart)
        taylor = (du * xbar).flatten(1).sum(1)
        return ((1 - lam) * ce_y + lam * ce_bar + lam * taylor).mean()

    return loss


def fedmix_code_loss(lam):
    """FedMix as LINs-lab/FedBR (6c4c539, ``fedbr/algorithms.py`` ``FedMix.update``) computes it: loss1 = (1 − λ)
    mean CE(f(u), y) at u = (1 − λ)x, loss2 = −λ Σ ȳ log softmax f(u) / B, loss3 = Σ λ (∂loss1/∂u) x̄ / B."""

    def loss(net, xb, yb, xbar, ybar, gen):
        u = ((1 - lam) * xb).requires_grad_(True)
        out = net(u)
        loss1 = (1 - lam) * F.cross_entropy(out, yb)
        loss2 = -lam * torch.sum(F.log_softmax(out, 1) * ybar) / len(ybar)
        (grad,) = torch.autograd.grad(loss1, u, create_graph=True)
        loss3 = torch.sum(lam * grad * xbar) / len(ybar)
        return loss1 + loss2 + loss3

    return loss


def naivemix_loss(lam, lam_beta=None):
    """NaiveMix (FedMix paper; Flower's ``NaiveMixClient``): x̃ = (1 − λ)x + λx̄, loss (1 − λ)ℓ(f(x̃), y) + λℓ(f(x̃), ȳ).
    With ``lam_beta`` = a (FLea's code), λ_i ~ Beta(a, a) per sample from a numpy stream seeded by the client's
    mix stream after its pick."""

    def loss(net, xb, yb, xbar, ybar, gen):
        if lam_beta is None:
            lam_i = torch.full((len(yb),), lam)
        else:
            seed = int(torch.randint(2**62, (1,), generator=gen))
            lam_i = torch.as_tensor(np.random.default_rng(seed).beta(lam_beta, lam_beta, size=len(yb)))
        out = net((1 - lam_i.view(-1, 1, 1, 1)) * xb + lam_i.view(-1, 1, 1, 1) * xbar)
        ce_y = F.cross_entropy(out, yb, reduction="none")
        ce_bar = -(ybar * F.log_softmax(out, dim=1)).sum(1)
        return ((1 - lam_i) * ce_y + lam_i * ce_bar).mean()

    return loss


@pytest.mark.parametrize(
    "method, params_, reference",
    [
        ("fedmix", {"lam": 0.3}, fedmix_paper_loss(0.3)),
        ("fedmix", {"lam": 0.3, "taylor_term": "code"}, fedmix_code_loss(0.3)),
        ("naivemix", {"lam": 0.3}, naivemix_loss(0.3)),
        ("naivemix", {"lam_beta": 2.0}, naivemix_loss(None, lam_beta=2.0)),
        ("naivemix", {"lam": 0.3, "share_fraction": 0.5}, naivemix_loss(0.3)),
    ],
    ids=["fedmix", "fedmix_code", "naivemix", "naivemix_beta", "naivemix_half_shared"],
)
def test_fedmix_and_naivemix_are_the_papers_losses_on_other_clients_means(monkeypatch, method, params_, reference):
    size = 3
    with float64():
        ctx = tiny_context(monkeypatch)
        x0 = params(ctx.model)
        algorithm = build_algorithm(method, mean_batch=size, **params_)
        sampled = run_rounds(ctx, algorithm, ROUNDS)
        fraction = params_.get("share_fraction", 1.0)
        x = mix_rounds(ctx, x0, sampled, size, reference, fraction)
        assert_close(params(ctx.model), x, "global model")
        x_bar, y_bar, owner = shared_means(ctx, size, fraction)
    assert_close([algorithm.x_bar, algorithm.y_bar], [x_bar, y_bar], "shared means")
    assert ctx.ledger == {"mean_batches": len(owner)}


def test_mean_sharing_rejects_a_share_fraction_outside_0_1_and_naivemix_a_non_positive_beta():
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match=rf"fedmix: share_fraction must be in \(0, 1\], got {bad}"):
            build_algorithm("fedmix", share_fraction=bad)
    assert build_algorithm("naivemix", lam_beta=0.5).lam_beta == 0.5  # Beta(a, a) for any a > 0 (U-shaped below 1)
    with pytest.raises(ValueError, match="naivemix: lam_beta must be > 0, got 0.0"):
        build_algorithm("naivemix", lam_beta=0.0)


def test_share_subset_keeps_ceil_fraction_n_samples_at_least_one():
    g = torch.Generator().manual_seed(0)
    for n, fraction, k in [(10, 0.05, 1), (10, 0.25, 3), (7, 0.5, 4), (7, 1.0, 7)]:
        idx = share_subset(n, fraction, g)
        assert len(idx) == k and len(set(idx.tolist())) == k and all(0 <= i < n for i in idx.tolist())


def test_naivemix_moves_a_per_sample_lambda_to_the_input_s_dtype_and_device():
    """NaiveMix draws λ_i ~ Beta(a, a) with numpy (a float64 CPU tensor); the mix is computed in the input's dtype
    (float32 here: ℓ((1 − λ_i)x_i + λ_i x̄_i, (1 − λ_i)y_i + λ_i ȳ_i), mean over the batch) and on its device
    (``meta`` stands in for a GPU)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = wiring_mlp(4, 3, 1)  # float32
        x, x_bar = torch.randn(5, 4, 1, 1), torch.randn(5, 4, 1, 1)
        y, y_bar = torch.tensor([0, 2, 1, 1, 0]), torch.softmax(torch.randn(5, 3), 1)
    lam = torch.tensor([0.1, 0.5, 0.9, 0.3, 0.7], dtype=torch.float64)
    loss = naivemix_loss_of_fed(net, x, y, x_bar, y_bar, lam, 3)
    lam32 = lam.float()
    out = net((1 - lam32.view(-1, 1, 1, 1)) * x + lam32.view(-1, 1, 1, 1) * x_bar)
    target = (1 - lam32[:, None]) * torch.eye(3)[y] + lam32[:, None] * y_bar
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, -(target * F.log_softmax(out, 1)).sum(1).mean())
    meta = [t.to("meta") for t in (x, y, x_bar, y_bar)]
    assert naivemix_loss_of_fed(net.to("meta"), *meta[:2], *meta[2:], lam, 3).device.type == "meta"


# -------------------------------------------------------------------------------------------------------- FedNTD


def ntd_reference(tau, beta, teacher):
    """Lee-Gihun/FedNTD ``NTD_Loss``: CE(z, y) + β τ² KL(softmax(z̃_g/τ) ‖ softmax(z̃/τ)) (``batchmean``), z̃ the
    logits without the true class's column (``refine_as_not_true``), z_g the logits of the global model the client
    received (``_keep_global``)."""

    def not_true(logits, y):
        positions = torch.arange(logits.shape[1]).repeat(len(y), 1)
        positions = positions[positions != y.view(-1, 1)].view(len(y), -1)
        return torch.gather(logits, 1, positions)

    def loss(net, xb, yb, r, k):
        logits = net(xb)
        with torch.no_grad():
            dg_probs = torch.softmax(not_true(teacher(xb), yb) / tau, dim=1)
        pred = F.log_softmax(not_true(logits, yb) / tau, dim=1)
        ntd = tau**2 * (dg_probs * (dg_probs.log() - pred)).sum() / len(yb)
        return F.cross_entropy(logits, yb) + beta * ntd

    return loss


def test_fedntd_is_ntd_loss_with_the_global_model_as_teacher(monkeypatch):
    tau, beta = 2.5, 0.7
    with float64():
        ctx = tiny_context(monkeypatch)
        x0 = params(ctx.model)
        sampled = run_rounds(ctx, build_algorithm("fedntd", tau=tau, beta=beta), ROUNDS)
        teacher = wiring_mlp(4, 3, 1).requires_grad_(False)
        x = fedavg_rounds(ctx, x0, sampled, ntd_reference(tau, beta, teacher), prepare=lambda r, k, x: load(teacher, x))
    assert_close(params(ctx.model), x, "global model")


# --------------------------------------------------------------------------------------------------------- FedLC


def fedlc_reference(counts, tau):
    """FL-bench ``FedLCClient.logit_calibrated_loss`` (FLea's ``myuser.py`` is the same loss): with the client's
    training-label counts n_c, −log( e^{z_y − τ n_y^{−1/4}} / Σ_c e^{z_c − τ n_c^{−1/4}} ), summed over the batch
    / B."""

    def loss(net, xb, yb, r, k):
        cal = torch.exp(net(xb) - tau * counts[k].pow(-1 / 4).unsqueeze(0).expand(len(yb), -1))
        y_logit = torch.gather(cal, dim=-1, index=yb.unsqueeze(1))
        return -torch.log(y_logit / cal.sum(dim=-1, keepdim=True)).sum() / len(yb)

    return loss


@pytest.mark.parametrize(
    "absent, count",  # n_c as each code makes it: FL-bench 1e-8 for a class the client lacks, FLea + 1e-6 to all
    [("floor", lambda n: n if n else 1e-8), ("offset", lambda n: n + 1e-6)],
)
def test_fedlc_calibrates_by_the_client_s_own_label_counts(monkeypatch, absent, count):
    tau = 0.6
    with float64():
        ctx = tiny_context(monkeypatch)
        ctx.train_idx[3] = ctx.train_idx[3][ctx.client_data(3)[1] != 2]  # client 3 lacks the last class
        x0 = params(ctx.model)
        sampled = run_rounds(ctx, build_algorithm("fedlc", tau=tau, absent=absent), ROUNDS)
        counts = {}
        for k in range(ctx.num_clients):
            labels = ctx.client_data(k)[1].tolist()
            counts[k] = torch.tensor([float(count(labels.count(c))) for c in range(3)])
        x = fedavg_rounds(ctx, x0, sampled, fedlc_reference(counts, tau))
    assert any((c < 1e-5).any() for c in counts.values())  # a client lacks a class
    assert counts[3][2] < 1e-5 and all(3 in s for s in sampled)  # ... the last one, in every round
    assert_close(params(ctx.model), x, "global model")
