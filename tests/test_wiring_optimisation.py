"""Wiring of the optimisation baselines: their real hooks through ``run_round`` on the tiny problem of
``wiring.py``, against plain transcriptions of the reference code (NIID-Bench's ``experiments.py``, which DA-FL's
SCAFFOLD and FedNova come from)."""

import pytest
import torch
import torch.nn.functional as F
from wiring import assert_close, batches, float64, params, run_rounds, tiny_context, wiring_mlp

from fed.algorithms import build_algorithm

ROUNDS = 3


def niid_bench_scaffold(ctx, x0, sampled, lr, momentum, global_lr=1.0):
    """NIID-Bench ``train_net_scaffold`` + ``local_train_net_scaffold`` + the scaffold branch of ``main``: after
    each ``optimizer.step()`` (SGD with momentum ρ) the weights move by −lr·(c − c_i); option II with cnt steps;
    c += Σ Δc_i / N; the global model is the n_k-weighted mean (NIID-Bench has no η_g: with one, the paper's
    x ← x + η_g (mean − x))."""
    n_clients = ctx.num_clients
    x = [t.clone() for t in x0]
    c = [torch.zeros_like(t) for t in x]
    c_local = {k: [torch.zeros_like(t) for t in x] for k in range(n_clients)}
    for r, selected in enumerate(sampled, start=1):
        states, sizes, total_delta = [], [], [torch.zeros_like(t) for t in x]
        for k in selected:
            net = wiring_mlp(4, 3, 1)
            with torch.no_grad():
                for p, v in zip(net.parameters(), x):
                    p.copy_(v)
            opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
            X, Y = ctx.client_data(k)
            cnt = 0
            for b in batches(ctx, r, k):
                opt.zero_grad()
                F.cross_entropy(net(X[b]), Y[b]).backward()
                opt.step()
                with torch.no_grad():
                    for p, cg, cl in zip(net.parameters(), c, c_local[k]):
                        p.sub_(lr * (cg - cl))
                cnt += 1
            y = params(net)
            c_new = [cl - cg + (xg - yl) / (cnt * lr) for cl, cg, xg, yl in zip(c_local[k], c, x, y)]
            for acc, new, old in zip(total_delta, c_new, c_local[k]):
                acc += new - old
            c_local[k] = c_new
            states.append(y)
            sizes.append(len(Y))
        mean = [sum(s[j] * n / sum(sizes) for s, n in zip(states, sizes)) for j in range(len(x))]
        x = [xg + global_lr * (m - xg) for xg, m in zip(x, mean)]
        c = [cg + d / n_clients for cg, d in zip(c, total_delta)]
    return x, c, c_local


@pytest.mark.parametrize("global_lr", [1.0, 0.7])
def test_scaffold_is_niid_bench_s_update_with_momentum(monkeypatch, global_lr):
    with float64():
        ctx = tiny_context(monkeypatch)
        x0 = params(ctx.model)
        scaffold = build_algorithm("scaffold", global_lr=global_lr)
        sampled = run_rounds(ctx, scaffold, ROUNDS)
        x, c, c_local = niid_bench_scaffold(ctx, x0, sampled, ctx.cfg.lr, ctx.cfg.momentum, global_lr)
    assert ctx.cfg.momentum > 0 and len({len(s) for s in sampled}) == 1 and len(set(map(tuple, sampled))) > 1
    assert_close(params(ctx.model), x, "global model")
    assert_close(scaffold.c, c, "server control variate c")
    for k in sorted({k for s in sampled for k in s}):
        assert_close(ctx.clients.load(k, ROUNDS + 1)["c_i"], c_local[k], f"c_{k}")
    resumed = build_algorithm("scaffold")
    resumed.load_state_dict(scaffold.state_dict())  # c survives a checkpoint
    assert_close(resumed.c, c, "c after a checkpoint")
