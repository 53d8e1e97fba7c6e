"""Wiring of the optimisation baselines: their real hooks through ``run_round`` on the tiny problem of
``wiring.py``, against plain transcriptions of the reference code (NIID-Bench's ``experiments.py``, which DA-FL's
SCAFFOLD and FedNova come from)."""

import pytest
import torch
import torch.nn.functional as F
from wiring import assert_close, batches, float64, load, params, run_rounds, tiny_context, weighted_mean, wiring_mlp

from fed.algorithms import build_algorithm
from fed.algorithms.qffl import qffl_update

ROUNDS = 3


def niid_bench_scaffold(ctx, x0, sampled, lr, momentum, global_lr=1.0, c0=None, by_data=False):
    """NIID-Bench ``train_net_scaffold`` + ``local_train_net_scaffold`` + the scaffold branch of ``main``: after
    each ``optimizer.step()`` (SGD with momentum ρ) the weights move by −lr·(c − c_i); option II with cnt steps;
    c += Σ Δc_i / N; the global model is the n_k-weighted mean (NIID-Bench has no η_g: with one, the paper's
    x ← x + η_g (mean − x)).

    Initialisation: ``c0 = None`` starts c and every c_i at 0 (our default; Algorithm 1 takes them as inputs).
    NIID-Bench itself starts them at a random network: ``c_global = init_nets(...)[0]``, then
    ``c_nets[i].load_state_dict(c_global.state_dict())`` for every party, so c = c_i = c0 (pass its weights as
    ``c0``).

    ``by_data``: not NIID-Bench's but our ``control_average: data``, c += Σ_{i∈S} n_i/Σ_j n_j · Δc_i (j over all
    clients)."""
    n_clients = ctx.num_clients
    n_all = sum(len(ctx.client_data(k)[1]) for k in range(n_clients))
    x = [t.clone() for t in x0]
    c0 = [torch.zeros_like(t) for t in x] if c0 is None else c0
    c = [t.clone() for t in c0]
    c_local = {k: [t.clone() for t in c0] for k in range(n_clients)}
    for r, selected in enumerate(sampled, start=1):
        states, sizes, total_delta, data_delta = (
            [],
            [],
            [torch.zeros_like(t) for t in x],
            [torch.zeros_like(t) for t in x],
        )
        for k in selected:
            net = load(wiring_mlp(4, 3, 1), x)
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
            for acc, acc_n, new, old in zip(total_delta, data_delta, c_new, c_local[k]):
                acc += new - old
                acc_n += len(Y) / n_all * (new - old)
            c_local[k] = c_new
            states.append(y)
            sizes.append(len(Y))
        mean = [sum(s[j] * n / sum(sizes) for s, n in zip(states, sizes)) for j in range(len(x))]
        x = [xg + global_lr * (m - xg) for xg, m in zip(x, mean)]
        c = (
            [cg + d for cg, d in zip(c, data_delta)]
            if by_data
            else [cg + d / n_clients for cg, d in zip(c, total_delta)]
        )
    return x, c, c_local


@pytest.mark.parametrize("global_lr", [1.0, 0.7, 2.0])
def test_scaffold_is_niid_bench_s_update_with_momentum(monkeypatch, global_lr):
    """NIID-Bench's update with c and every c_i starting at 0 (``control_init: zeros``, our default), not at
    NIID-Bench's random network (``test_scaffold_random_net_init_is_niid_bench_s``)."""
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


def test_scaffold_averaging_c_by_data_share_is_its_transcription_and_not_niid_bench_s(monkeypatch):
    """``control_average: data``: c ← c + Σ_{i∈S} p_i Δc_i with p_i = n_i / Σ_j n_j (clients of 6–9 samples, 3 of 5
    sampled, momentum 0.5); it differs from NIID-Bench's uniform mean, so the two transcriptions tell them apart."""
    with float64():
        ctx = tiny_context(monkeypatch)
        x0 = params(ctx.model)
        scaffold = build_algorithm("scaffold", global_lr=0.7, control_average="data")
        sampled = run_rounds(ctx, scaffold, ROUNDS)
        x, c, c_local = niid_bench_scaffold(ctx, x0, sampled, ctx.cfg.lr, ctx.cfg.momentum, 0.7, by_data=True)
        _, c_uniform, _ = niid_bench_scaffold(ctx, x0, sampled, ctx.cfg.lr, ctx.cfg.momentum, 0.7)
    assert len(set(ctx.client_sizes())) > 1 and len(set(map(tuple, sampled))) > 1
    assert_close(params(ctx.model), x, "global model")
    assert_close(scaffold.c, c, "server control variate c")
    for k in sorted({k for s in sampled for k in s}):
        assert_close(ctx.clients.load(k, ROUNDS + 1)["c_i"], c_local[k], f"c_{k}")
    assert max(float((a - b).abs().max()) for a, b in zip(c, c_uniform)) > 1e-3


def test_scaffold_rejects_an_unknown_correction():
    with pytest.raises(ValueError, match="correction after_step\\|in_loss, got 'in_grad'"):
        build_algorithm("scaffold", correction="in_grad")
    with pytest.raises(ValueError, match="control_init zeros\\|random_net, got 'ones'"):
        build_algorithm("scaffold", control_init="ones")
    with pytest.raises(ValueError, match="control_average uniform\\|data, got 'median'"):
        build_algorithm("scaffold", control_average="median")


def test_scaffold_random_net_init_is_niid_bench_s(monkeypatch):
    """``control_init: random_net``: c and every c_i start at the weights of a freshly initialised network, as in
    NIID-Bench's scaffold branch of ``main`` (``c_global = init_nets(...)[0]``, loaded into every ``c_nets[i]``). The
    network is drawn from the run's own stream (given, like the batch order). Under partial participation (3 of 5)
    it changes the run: the zeros run differs from it after 2 rounds."""
    rounds = 2
    with float64():
        ctx = tiny_context(monkeypatch)
        x0 = params(ctx.model)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ctx.seed_int("scaffold_control_init"))
            c0 = params(wiring_mlp(4, 3, 1))
        scaffold = build_algorithm("scaffold", control_init="random_net")
        sampled = run_rounds(ctx, scaffold, rounds)
        x, c, c_local = niid_bench_scaffold(ctx, x0, sampled, ctx.cfg.lr, ctx.cfg.momentum, c0=c0)
        zeros = tiny_context(monkeypatch)
        run_rounds(zeros, build_algorithm("scaffold"), rounds)
        resumed, before = build_algorithm("scaffold", control_init="random_net"), torch.get_rng_state()
        resumed.setup(ctx)  # on resume: the same c0, and torch's global stream untouched
        assert torch.equal(torch.get_rng_state(), before)
        assert_close(resumed.c, c0, "c0 rebuilt on resume")
    assert_close(params(ctx.model), x, "global model")
    assert_close(scaffold.c, c, "server control variate c")
    for k in sorted({k for s in sampled for k in s}):
        assert_close(ctx.clients.load(k, rounds + 1)["c_i"], c_local[k], f"c_{k}")
    assert all(t.abs().max() > 0 for t in c0) and not any(torch.equal(a, b) for a, b in zip(c0, x0))
    assert len(set(map(tuple, sampled))) > 1  # partial participation: a client sampled once keeps c0 in between
    gap = max(float((a - b).abs().max()) for a, b in zip(params(ctx.model), params(zeros.model)))
    print(f"max |random_net - zeros| after {rounds} rounds: {gap:.3g}")
    assert gap > 1e-3, gap


def niid_bench_fednova(ctx, x0, sampled, lr, rho):
    """NIID-Bench ``train_net_fednova`` + the fednova branch of ``main``: SGD with momentum ρ counting its steps τ;
    a_i = (τ − ρ(1 − ρ^τ)/(1 − ρ))/(1 − ρ), d_i = (x − y_i)/a_i; with p_i = n_i/Σn over the sampled clients,
    x ← x − (Σ p_i a_i)·Σ p_i d_i."""
    x = [t.clone() for t in x0]
    for r, selected in enumerate(sampled, start=1):
        a_list, d_list, n_list = [], [], []
        for k in selected:
            net = load(wiring_mlp(4, 3, 1), x)
            opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=rho)
            X, Y = ctx.client_data(k)
            tau = 0
            for b in batches(ctx, r, k):
                opt.zero_grad()
                F.cross_entropy(net(X[b]), Y[b]).backward()
                opt.step()
                tau += 1
            a_i = (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho)
            a_list.append(a_i)
            d_list.append([(xg - y) / a_i for xg, y in zip(x, params(net))])
            n_list.append(len(Y))
        total_n = sum(n_list)
        d_total = [sum(d[j] * n / total_n for d, n in zip(d_list, n_list)) for j in range(len(x))]
        coeff = sum(a * n / total_n for a, n in zip(a_list, n_list))
        x = [xg - coeff * d for xg, d in zip(x, d_total)]
    return x


@pytest.mark.parametrize("momentum", [0.5, 0.0])
def test_fednova_is_niid_bench_s_normalised_averaging(monkeypatch, momentum):
    with float64():
        # batch 3: the clients take 4 or 6 steps in every round (with equal τ_i FedNova is FedAvg)
        ctx = tiny_context(monkeypatch, batch_size=3, momentum=momentum)
        x0 = params(ctx.model)
        fednova = build_algorithm("fednova")
        sampled = run_rounds(ctx, fednova, ROUNDS)
        x = niid_bench_fednova(ctx, x0, sampled, ctx.cfg.lr, momentum)
    steps = {len(batches(ctx, 1, k)) for s in sampled for k in s}
    assert len(steps) > 1 and len(set(map(tuple, sampled))) > 1
    assert_close(params(ctx.model), x, "global model")
    assert fednova.state_dict() == {} and all(ctx.clients.load(k, ROUNDS + 1) == {} for k in range(5))


def fedprox_reference(ctx, x0, sampled, lr, momentum, mu):
    """FedProx (litian96/FedProx ``PerturbedGradientDescent``: w ← w − lr(∇F + μ(w − w_t)), the gradient of
    F + (μ/2)‖w − w_t‖²), written as NIID-Bench's ``train_net_fedprox`` does under momentum: the proximal term added
    to the loss of an SGD optimiser with momentum ρ; the global model is the n_k-weighted mean."""
    x = [t.clone() for t in x0]
    for r, selected in enumerate(sampled, start=1):
        states, sizes = [], []
        for k in selected:
            net = load(wiring_mlp(4, 3, 1), x)
            opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
            X, Y = ctx.client_data(k)
            for b in batches(ctx, r, k):
                opt.zero_grad()
                prox = sum((mu / 2) * torch.norm(w - wg) ** 2 for w, wg in zip(net.parameters(), x))
                (F.cross_entropy(net(X[b]), Y[b]) + prox).backward()
                opt.step()
            states.append(params(net))
            sizes.append(len(Y))
        x = weighted_mean(states, sizes)
    return x


def test_fedprox_is_the_proximal_step_with_momentum(monkeypatch):
    mu = 0.4
    with float64():
        ctx = tiny_context(monkeypatch)
        x0 = params(ctx.model)
        sampled = run_rounds(ctx, build_algorithm("fedprox", mu=mu), ROUNDS)
        x = fedprox_reference(ctx, x0, sampled, ctx.cfg.lr, ctx.cfg.momentum, mu)
    assert_close(params(ctx.model), x, "global model")


def fair_flearn_qffedavg(ctx, x0, sampled, lr, momentum, q, L=None):
    """fair_flearn ``qffedavg.py``: per sampled client, F_k = its training loss at the global model (before
    training, + 1e-10); after local training ∆w = L(w − w_k) with L = 1/lr, Δ_k = F_k^q ∆w,
    h_k = q F_k^(q−1) ‖∆w‖² + L F_k^q; ``aggregate2``: w ← w − Σ_k Δ_k / Σ_k h_k. Local training is the run's SGD
    (momentum ρ; fair_flearn's is plain gradient descent). ``L`` given: the paper's Lipschitz estimate instead of
    fair_flearn's 1/lr."""
    L = 1 / lr if L is None else L
    x = [t.clone() for t in x0]
    for r, selected in enumerate(sampled, start=1):
        deltas, hs = [], []
        for k in selected:
            net = load(wiring_mlp(4, 3, 1), x)
            X, Y = ctx.client_data(k)
            with torch.no_grad():
                loss = float(F.cross_entropy(net(X), Y))
            opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
            for b in batches(ctx, r, k):
                opt.zero_grad()
                F.cross_entropy(net(X[b]), Y[b]).backward()
                opt.step()
            grads = [L * (u - v) for u, v in zip(x, params(net))]
            f = loss + 1e-10
            deltas.append([f**q * g for g in grads])
            hs.append(q * f ** (q - 1) * sum(float(g.pow(2).sum()) for g in grads) + L * f**q)
        x = [xg - sum(d[j] for d in deltas) / sum(hs) for j, xg in enumerate(x)]
    return x


# q = 0: the simple mean of the client models (FedAvg); L = 0.8: the paper's Lipschitz estimate, here below 1/lr = 10
@pytest.mark.parametrize("q, L", [(0.7, None), (2.0, None), (0.0, None), (1.5, 0.8)])
def test_qffl_is_fair_flearn_s_qffedavg(monkeypatch, q, L):
    with float64():
        ctx = tiny_context(monkeypatch)
        x0 = params(ctx.model)
        qffl = build_algorithm("qffl", q=q, lipschitz=L)
        sampled = run_rounds(ctx, qffl, ROUNDS)
        x = fair_flearn_qffedavg(ctx, x0, sampled, ctx.cfg.lr, ctx.cfg.momentum, q, L)
    assert_close(params(ctx.model), x, "global model")
    assert qffl.state_dict() == {} and all(ctx.clients.load(k, ROUNDS + 1) == {} for k in range(5))


def test_qffl_rejects_a_negative_q_and_a_non_positive_lipschitz_estimate():
    with pytest.raises(ValueError, match="q must be >= 0, got -0.1"):
        build_algorithm("qffl", q=-0.1)
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match=f"lipschitz must be > 0, got {bad}"):
            build_algorithm("qffl", lipschitz=bad)


def test_qffl_gives_a_client_with_zero_loss_fair_flearn_s_weight_1e_10():
    """F_k = 0 + 1e-10 (fair_flearn: ``loss + 1e-10``), q = 1, L = 1, one client at w_k = w − (1, 2):
    Δ = (1, 2), h = ‖Δ‖² + F = 5 + 1e-10, w ← w − F Δ / h (a tiny step towards the client)."""
    w = {"w": torch.tensor([0.5, -1.0], dtype=torch.float64)}
    client = {"w": torch.tensor([-0.5, -3.0], dtype=torch.float64)}
    out = qffl_update(w, [client], [0.0], q=1.0, L=1.0, keys={"w"})
    f = 1e-10
    expected = torch.tensor([0.5 - f * 1 / (5 + f), -1.0 - f * 2 / (5 + f)], dtype=torch.float64)
    assert out["w"][0] < 0.5 and out["w"][1] < -1.0  # towards the client
    assert_close(out["w"], expected, "step", rtol=1e-14, atol=0.0)


def test_qffl_accumulates_the_server_step_of_float32_models_in_float64():
    """Σ_k F_k^q Δ_k and Σ_k h_k in float64, one rounding to the model's float32 at the end."""
    g = torch.Generator().manual_seed(0)
    w = {"w": torch.zeros(400)}  # float32; at 0 the step is the whole result, so its rounding shows
    clients = [{"w": torch.randn(400, generator=g)} for _ in range(3)]
    losses, q, L = [0.3, 1.7, 0.9], 2.0, 10.0
    numer, h = torch.zeros(400, dtype=torch.float64), 0.0
    for c, loss in zip(clients, losses):
        f = loss + 1e-10
        delta = L * (w["w"].double() - c["w"].double())
        numer += f**q * delta
        h += q * f ** (q - 1) * float(delta.pow(2).sum()) + L * f**q
    out = qffl_update(w, clients, losses, q, L, {"w"})["w"]
    assert out.dtype == torch.float32
    assert torch.equal(out, (w["w"].double() - numer / h).float())


def test_a_method_s_local_loss_sees_its_client_and_the_round_s_global_parameters(monkeypatch):
    """The interface every method's ``local_loss`` reads (``LocalContext``): the client it trains, detached copies of
    the round's global parameters, and what its ``client_update`` prepared (``extra``)."""
    from fed.algorithms.base import Algorithm

    class Recording(Algorithm):
        def __init__(self):
            self.seen = []

        def client_update(self, ctx, client):
            ctx.model.load_state_dict(ctx.global_state)
            return self.train_locally(ctx, client, *ctx.client_data(client), extra={"tag": 10 * client})

        def local_loss(self, model, x, y, local, ctx):
            at_start = [g.clone() for g in local.global_params]
            self.seen.append((ctx.round, local.client, local.extra["tag"], at_start))
            return super().local_loss(model, x, y, local, ctx)

    with float64():
        ctx = tiny_context(monkeypatch)
        method = Recording()
        globals_by_round, sampled = {}, []
        for r in range(1, 3):
            globals_by_round[r] = params(ctx.model)
            sampled += run_rounds(ctx, method, 1)
    assert [(r, k) for r, k, _, _ in method.seen] == [
        (r, k) for r, clients in enumerate(sampled, start=1) for k in clients for _ in batches(ctx, r, k)
    ]
    for r, k, tag, global_params in method.seen:
        assert tag == 10 * k and not any(g.requires_grad for g in global_params)
        assert_close(global_params, globals_by_round[r], f"round {r}, client {k}: the round's global parameters")
