"""Wiring of FedDPMS: its real hooks through ``run_round`` on the tiny problem of ``wiring.py`` (with a tiny VAE
trunk), against a plain transcription of the official code's loop (CityChan/Federated-DPMS @ dd16e44: ``train.py``
Stage I and II, ``Localupdate.update_weights`` / ``update_weights_VAEtoCNN``, ``utils.GenData``,
``sampling.average_weights``).

Where we depart from the code on purpose (docs/deviations.md), the transcription states the departure and follows
ours: the means and the acceptance use round P's global model (the code: its round-P local models, ``Models[idx] =
local_weights[idx]``), one pool per (donor, class) serves every receiver matched to that donor (the code draws a new
pool per receiver), the pool keeps the first α accepted, the draws come from the run's ``dpms`` streams, the
reconstruction term is the slides' MSE (the code: BCE on sigmoid inputs), and the default matching / noise are the
slides' (the code's are the options ``send_classes: all``, ``noise: code``, ``mean: scalar``)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from wiring import assert_close, batches, float64, run_rounds, tiny_context

from fed.algorithms import build_algorithm
from fed.models.base import SequentialSplit

CODE = 2  # latent size
P, ROUNDS = 2, 4  # Stage I rounds 1..P (round P: every client), Stage II rounds P+1..ROUNDS
LAMBDA, SIGMA, QUOTA, TRIES, K = 0.3, 1.5, 4, 12, 2  # λ, σ, α, draws per class at most, top-/bottom-k classes
CLIP = 0.9  # C: among the rows' norms, so that clipping acts on some rows and leaves others
CFG = {"optimizer": "adam", "lr": 0.05, "aggregation": "mean"}  # the code: a fresh Adam per update, unweighted mean


def tiny_vae(in_channels: int, num_classes: int, image_size: int, hidden: int = 5) -> SequentialSplit:
    """The code's classifier shape: trunk E, then Linear(·, code) → Linear(code, classes)."""
    dim = in_channels * image_size * image_size
    return SequentialSplit(
        nn.Sequential(nn.Flatten(), nn.Linear(dim, hidden), nn.Tanh()),
        nn.Sequential(nn.Linear(hidden, CODE), nn.Linear(CODE, num_classes)),
    )


def tiny_vae_extras(model, input_shape):
    """Mu, LogVar on the trunk and a decoder z → x (what ``fed.models.vae.vae_modules`` adds to the real trunks)."""
    hidden, dim = model.classifier[0].in_features, math.prod(input_shape)
    decoder = nn.Sequential(nn.Linear(CODE, 4), nn.Tanh(), nn.Linear(4, dim), nn.Unflatten(1, input_shape))
    return {"mu": nn.Linear(hidden, CODE), "logvar": nn.Linear(hidden, CODE), "decoder": decoder}


def is_decoder(key):
    return key.startswith("extras.decoder.")


def average_weights(states):
    """``sampling.average_weights``: the unweighted mean of every key."""
    return {k: sum(s[k] for s in states) / len(states) for k in states[0]}


def code_feddpms(ctx, state0, sampled, noise="calibrated", mean="vector", send="needed", kld="mean"):
    """The official loop. Returns the global state after Stage I, what each receiver got and its donor, and the
    final global state."""
    n_clients = ctx.num_clients
    net = tiny_vae(4, 3, 1)
    net.extras = nn.ModuleDict(tiny_vae_extras(net, ctx.input_shape))

    def state():
        return {k: v.detach().clone() for k, v in net.state_dict().items()}

    # ---- Stage I (train.py: `for epoch in range(args.pretrain)`): persistent local models, each its own decoder
    glob, local = dict(state0), {c: dict(state0) for c in range(n_clients)}
    for r, selected in enumerate(sampled[:P], start=1):
        weights = []
        for c in selected:
            net.load_state_dict(local[c])
            torch.manual_seed(ctx.seed_int("client", r, c))  # the run's per-client stream: the reparameterisation
            opt = torch.optim.Adam(net.parameters(), lr=ctx.cfg.lr)  # Localupdate.update_weights: fresh each round
            X, Y = ctx.client_data(c)
            for b in batches(ctx, r, c):
                x, y = X[b], Y[b]
                h = net.body(x)
                mu, logvar = net.extras["mu"](h), net.extras["logvar"](h)
                x_hat = net.extras["decoder"](mu + torch.exp(logvar / 2) * torch.randn(mu.shape))
                kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp())
                kl = kl.mean() if kld == "mean" else kl.sum(1).mean()  # Localupdate.py l. 49: over B × d (`sum`: d)
                rec = (x_hat - x).pow(2).sum() / len(x)  # the slides' MSE at the code's BCE scale: summed / B
                loss = LAMBDA * (rec + kl) + F.cross_entropy(net.classifier(h), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            local[c] = state()
            weights.append(local[c])
        glob = average_weights(weights)  # train.py l. 255; the global decoder is the mean of the decoders too
        for c in range(n_clients):  # l. 257-274: Encoder, Classifier, Mu, LogVar from the mean; own Decoder kept
            local[c] = {k: (local[c][k] if is_decoder(k) else v) for k, v in glob.items()}
    after_stage1 = dict(glob)

    # ---- Stage II, round P + 1: means, noisy draws, acceptance (utils.GenData), matching (train.py l. 189-193)
    net.load_state_dict(glob)
    net.eval()
    decoder = net.extras["decoder"]
    data = [ctx.client_data(c) for c in range(n_clients)]
    major, need = [], []
    for _, Y in data:
        counts = np.bincount(Y.numpy(), minlength=3)
        order = np.argsort(counts, kind="stable")  # `counts.argsort()[::-1][0:3]`, `[7:]`
        major.append([int(c) for c in order[::-1][:K] if counts[c] > 0])
        need.append([int(c) for c in order[:K]])
    pools, clipped, sizes = {}, {}, {}
    with torch.no_grad():
        for j, (X, Y) in enumerate(data):
            for c in major[j]:
                g = ctx.rng("dpms", j, c)
                h = net.body(X[Y == c])
                mu = net.extras["mu"](h)
                if noise == "code":  # GenData: reparameterise, resample, torch.mean(z), std = args.std
                    z = mu + torch.exp(net.extras["logvar"](h) / 2) * torch.randn(mu.shape, generator=g)
                    n = len(z)
                    z = z[torch.randint(n, (int(0.1 * n) if n > 20 else n,), generator=g)]
                    m = z.mean().repeat(CODE) if mean == "scalar" else z.mean(0)
                    std = SIGMA
                else:  # the slides' Gaussian mechanism, rows clipped to C, std σ · 2C / N
                    C = CLIP
                    clipped[j, c], sizes[j, c] = float((mu.norm(dim=1) > C).double().mean()), len(mu)
                    m = (mu * torch.clamp(C / mu.norm(dim=1, keepdim=True), max=1.0)).mean(0)
                    m = m.mean().repeat(CODE) if mean == "scalar" else m
                    std = SIGMA * 2 * C / len(mu)
                kept, tries = [], 0
                while len(kept) < QUOTA and tries < TRIES:  # `while counts < num_gen and iteration < 200`
                    z = m + std * torch.randn(QUOTA, CODE, generator=g)
                    tries += QUOTA
                    p = net(decoder(z)).argmax(1)  # decode with the global decoder, the donor's classifier
                    kept += [z[t] for t in range(QUOTA) if p[t] == c]
                pools[j, c] = (kept[:QUOTA], tries)
    donors, received = [], {}
    for i in range(n_clients):
        overlap = [len(set(need[i]) & set(major[j])) for j in range(n_clients)]
        if send == "all":  # `np.argmax(L2D[idx])`, GenData over all of the donor's Major_classes
            j = int(np.argmax(overlap))
            classes = major[j]
        else:  # the slides: a donor j ≠ i, the classes i is scarce in
            j = max(range(n_clients), key=lambda j: (overlap[j] if j != i else -1, -j))
            j = j if overlap[j] > 0 else None
            classes = [] if j is None else [c for c in need[i] if c in major[j]]
        donors.append(-1 if j is None else j)
        z = [v for c in classes for v in pools[j, c][0]]
        y = [c for c in classes for _ in pools[j, c][0]]
        received[i] = (torch.stack(z) if z else torch.zeros(0, CODE), torch.tensor(y, dtype=torch.long))
    synthetic = {i: (decoder(z).detach(), y) for i, (z, y) in received.items()}

    # ---- Stage II training (`update_weights_VAEtoCNN`): CE on real + synthetic data, decoder frozen
    net.train()
    for r, selected in enumerate(sampled[P:], start=P + 1):
        weights = []
        for c in selected:
            net.load_state_dict(glob)
            opt = torch.optim.Adam(net.parameters(), lr=ctx.cfg.lr)
            X, Y = ctx.client_data(c)
            X, Y = torch.cat([X, synthetic[c][0]]), torch.cat([Y, synthetic[c][1]])
            g = ctx.rng("shuffle", r, c)
            for _ in range(ctx.cfg.local_epochs):
                for b in torch.randperm(len(Y), generator=g).split(ctx.cfg.batch_size):
                    loss = F.cross_entropy(net(X[b]), Y[b])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            weights.append(state())
        glob = average_weights(weights)
    attempts = max(t for _, t in pools.values())
    return after_stage1, received, donors, glob, attempts, clipped, sizes


OPTIONS = [
    {},  # the slides' DPMS (defaults)
    {"noise": "code", "mean": "scalar", "send_classes": "all"},  # the official code's
    {"noise": "code", "mean": "vector"},
    {"mean": "scalar", "kld": "sum"},  # the scalar collapse of the clipped mean; the KLD summed over dimensions
]


@pytest.mark.parametrize("options", OPTIONS, ids=["slides", "code", "code_vector_mean", "scalar_mean_kld_sum"])
def test_feddpms_is_the_official_loop(monkeypatch, options):
    params = dict(preliminary_rounds=P, vae_weight=LAMBDA, noise_multiplier=SIGMA, quota=QUOTA, max_attempts=TRIES)
    params["clip_norm"] = CLIP
    with float64():
        ctx = tiny_context(monkeypatch, model=tiny_vae, extra_modules=tiny_vae_extras, **CFG)
        state0 = {k: v.clone() for k, v in ctx.global_state.items()}
        algo = build_algorithm("feddpms", abundant=K, **params, **options)
        sampled = run_rounds(ctx, algo, P)
        after_stage1 = {k: v.clone() for k, v in ctx.global_state.items()}
        sampled += run_rounds(ctx, algo, 1)
        row = dict(ctx.round_metrics)  # round P + 1's: the sharing
        sampled += run_rounds(ctx, algo, ROUNDS - P - 1)
        expected = code_feddpms(
            ctx, state0, sampled, options.get("noise", "calibrated"), options.get("mean", "vector"),
            options.get("send_classes", "needed"), options.get("kld", "mean"),
        )  # fmt: skip
    stage1, received, donors, final, attempts, clipped, sizes = expected
    assert len(sampled[0]) < ctx.num_clients and sampled[P - 1] == list(range(ctx.num_clients))  # round P: all
    assert_close(after_stage1, stage1, "global state after Stage I (D̄ = the mean of the decoders)")
    assert row["dpms_donor"] == donors
    for i, (z, y) in received.items():
        assert torch.equal(algo._received[i][1], y), f"labels received by {i}"
        assert_close(algo._received[i][0], z, f"latents received by {i}")
    assert ctx.ledger["releases_per_class_max"] == attempts
    assert_close(ctx.global_state, final, "global state after Stage II")
    # non-degenerate: some draws rejected, some receivers augmented, not all classes forwarded
    got = [len(y) for _, y in received.values()]
    assert sum(got) > 0 and attempts > QUOTA and sum(1 for n in got if n == 0) < len(got)
    if options.get("noise", "calibrated") == "calibrated":
        assert 0 < max(clipped.values()) < 1 and ctx.ledger["clip_norm"] == CLIP  # some rows clipped, not all
        assert ctx.ledger["clipped_fraction_max"] == pytest.approx(max(clipped.values()), rel=1e-6)
        assert ctx.ledger["sensitivity_max"] == pytest.approx(2 * CLIP / min(sizes.values()), rel=1e-12)
