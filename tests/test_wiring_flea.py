"""Wiring of FLea: its real hooks through ``run_round`` on the tiny problem of ``wiring.py`` (4 rounds: rounds 2–4
mix with the buffer of the previous round's clients), against plain transcriptions of

- the authors' code (XTxiatong/FLea @ ee3947f, ``FLAlgorithms/users/myuser.py``): round 0 ``train_decor(3E,
  'CE_COR_KL')`` (l. 1214), later rounds ``train_decor_feature``, branch ``MCE_DeC_KL`` (l. 1476), the buffer of
  ``serverbase.py`` (``aggregate_features`` after ``send_parameters``: the last round's clients, extracted by the new
  global model in eval mode), the shared samples of ``userbase.py`` (``send_data``: drawn with replacement);
- the paper (Algorithm 1, Eqs. 2–6, 8), FLea's defaults.

The transcriptions take what the method is given, not what it computes: the sampled clients, the batch order
(``wiring.batches``), the shared sample indices (``ctx.rng("flea_share", k)``) and the mixing stream
``ctx.np_rng("flea_mix", round, client)`` (the loader's permutations and the β draws, in the order the code asks for
them). Optimiser: the engine's SGD with momentum for both (the code's Adam re-created per batch is an engine choice).
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from wiring import assert_close, batches, float64, load, params, tiny_context, wiring_mlp

import fed.algorithms.flea as flea_module
from fed.algorithms import LocalContext, build_algorithm
from fed.losses import distance_correlation
from fed.rounds import run_round

ROUNDS = 4
# non-default: τ ≠ 1, every weight ≠ 1, α large enough that ⌊α|D_k|⌋ > 0 on clients of 6–9 samples
TAU, BETA_A, FRACTION = 2.5, 2.0, 0.5
LAMBDA_CE, LAMBDA_DIS, LAMBDA_DCOR = 0.7, 1.3, 2.4
CODE = dict(kd="buffer", dcor="root", lambda_ce=LAMBDA_CE, dcor_schedule="code", warmup="code")
CODE.update(feature_batches="loader", share_replace=True)
PAPER = {}
RHO_ROWS = 7  # ρ of Fig. 9(b) on the first rows of F(t) only (RHO_SAMPLES, lowered so that F(t)'s ~10 rows exceed it)


def run_rows(ctx, algorithm, rounds):
    """``wiring.run_rounds``, keeping each round's history row (its metrics)."""
    algorithm.setup(ctx)
    sampled, rows = [], []
    for _ in range(rounds):
        ctx.round += 1  # selection reads the round it selects for
        sampled.append(list(algorithm.select_clients(ctx)))
        ctx.round -= 1
        rows.append(run_round(ctx, algorithm))
    return sampled, rows


def pairwise_dist(a):
    """``pairwise_dist`` (myuser.py l. 13): √max(‖a_i‖² − 2a_i·a_j + ‖a_j‖², 1e-7)."""
    r = (a * a).sum(1).reshape(-1, 1)
    return torch.maximum(r - 2 * a @ a.T + r.T, 1e-7 * torch.ones(len(a), len(a))).sqrt()


def dist_corr(x, f):
    """``dist_corr`` (myuser.py l. 24) on the flattened batches (``Corelation``)."""
    n = len(x)
    a, b = pairwise_dist(x.reshape(n, -1)), pairwise_dist(f.reshape(n, -1))
    A = a - a.mean(1).repeat(n, 1).T - a.mean(0).repeat(n, 1) + a.mean()
    B = b - b.mean(1).repeat(n, 1).T - b.mean(0).repeat(n, 1) + b.mean()
    cov = torch.sqrt((A * B).sum() / n**2 + 1e-7)
    var_x, var_f = torch.sqrt((A * A).sum() / n**2 + 1e-7), torch.sqrt((B * B).sum() / n**2 + 1e-7)
    return cov / (torch.sqrt(var_x + 1e-7) * torch.sqrt(var_f + 1e-7))


def kl_div_batchmean(log_q, p):
    """``nn.KLDivLoss(reduction='batchmean')(log_q, p)`` = Σ p (log p − log q) / n."""
    return (p * (p.log() - log_q)).sum() / len(p)


def net_at(state):
    return load(wiring_mlp(4, 3, 1), state)


def flea_transcription(ctx, x0, sampled, code: bool):
    """The global model after each round, the buffer each round mixed with (code: ``MCE_DeC_KL``; else the
    paper's Eq. 6), and per round what the row reports: the mean training loss and step count, the round's first
    augmented batch (client, β, class mass of ỹ) and ρ, size and classes of the buffer it mixed with."""
    lr, momentum, E, bs, C = ctx.cfg.lr, ctx.cfg.momentum, ctx.cfg.local_epochs, ctx.cfg.batch_size, 3
    x_glob, buffer, buffers = [t.clone() for t in x0], None, {}
    log = {r: {} for r in range(1, len(sampled) + 2)}
    hold = {}
    for k in range(ctx.num_clients):  # hold_data: fixed once; ⌊α n⌋ with replacement (code) or without (paper)
        n, g = len(ctx.client_data(k)[1]), ctx.rng("flea_share", k)
        m = int(FRACTION * n)
        hold[k] = torch.randint(n, (m,), generator=g) if code else torch.randperm(n, generator=g)[:m]
    for r, selected in enumerate(sampled, start=1):
        glob = net_at(x_glob).eval()  # global_model.eval(): the frozen round-start teacher
        states, sizes, losses = [], [], []
        for k in selected:
            net = net_at(x_glob)
            opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
            X, Y = ctx.client_data(k)
            rng = ctx.np_rng("flea_mix", r, k)
            order = np.empty(0, dtype=np.int64)
            alpha3 = LAMBDA_DCOR * ((3 - 0.1 * (r - 1) if r - 1 < 20 else 1) / 3 if code else 1)
            seen = total = 0.0
            for b in batches(ctx, r, k, 3 * E if (code and r == 1) else E):
                batch_X, batch_Y = X[b], Y[b]
                batch_F = net.features(batch_X)  # get_feature: with gradient
                dcor = dist_corr(batch_X, batch_F) if code else dist_corr(batch_X, batch_F) ** 2
                if len(b) == 1:  # one sample: the code's guards give a constant ≈ 1 (zero gradient), we report 0
                    dcor = dcor.detach() * 0
                if buffer is None:  # round 0 of the code (train_decor, 'CE_COR_KL'); the paper's t = 1
                    logit = net(batch_X)
                    loss = F.cross_entropy(logit, batch_Y) + alpha3 * dcor
                    if code:  # loss1 + 0.5·loss2 + α3·loss3, loss2 = β·τ²·KL(p_g ‖ p_l) on the whole model
                        with torch.no_grad():
                            pro_gb = F.softmax(glob(batch_X) / TAU, dim=1)
                        loss2 = LAMBDA_DIS * TAU**2 * kl_div_batchmean(F.log_softmax(logit / TAU, dim=1), pro_gb)
                        loss = loss + 0.5 * loss2
                    else:  # Eq. 6 without augmentation: f̃ = f, KL(p_l ‖ p_g) with p_g = θ(t)[l:](f)
                        p_l, p_g = F.softmax(logit / TAU, 1), F.softmax(glob.head(batch_F) / TAU, 1)
                        loss = loss + LAMBDA_DIS * TAU**2 * (p_l * (p_l.log() - p_g.log())).sum(1).mean()
                else:
                    feats, labels = buffer
                    if code:  # get_next_feature_batch: a shuffled DataLoader(bs), cycled
                        if not len(order):
                            order = rng.permutation(len(labels))
                        idx, order = order[:bs], order[bs:]
                    else:  # equal-sized batches of the shuffled buffer
                        while len(order) < len(b):
                            order = np.concatenate([order, rng.permutation(len(labels))])
                        idx, order = order[: len(b)], order[len(b) :]
                    batch_X_fea, batch_Y_fea = feats[torch.as_tensor(idx)], labels[torch.as_tensor(idx)]
                    fea_num = min(len(batch_X), len(batch_X_fea))
                    batch_x, batch_y = batch_F[:fea_num], batch_Y[:fea_num]
                    batch_X_fea, batch_Y_fea = batch_X_fea[:fea_num], batch_Y_fea[:fea_num]
                    lam = rng.beta(BETA_A, BETA_A, fea_num)
                    mix_x = torch.zeros(batch_x.shape)
                    mix_y = torch.zeros(fea_num, C)
                    for i in range(fea_num):
                        mix_x[i] = lam[i] * batch_x[i] + (1 - lam[i]) * batch_X_fea[i]
                        mix_y[i] = lam[i] * F.one_hot(batch_y, C)[i] + (1 - lam[i]) * F.one_hot(batch_Y_fea, C)[i]
                    if "batch" not in log[r]:
                        log[r]["batch"] = (k, lam, mix_y.sum(0))
                    mix_logit = net.head(mix_x)
                    loss2 = -(F.log_softmax(mix_logit, dim=1) * mix_y).sum() / fea_num  # Multilabel
                    if code:
                        loss1 = F.cross_entropy(net(batch_X), batch_Y)
                        logit_lc, logit_gb = net.head(batch_X_fea), glob.head(batch_X_fea)
                        pro_gb, pro_lc = F.softmax(logit_gb / TAU, dim=1), F.log_softmax(logit_lc / TAU, dim=1)
                        loss4 = kl_div_batchmean(pro_lc, pro_gb.detach()) * TAU**2
                        loss = LAMBDA_CE * loss1 + loss2 + alpha3 * dcor + LAMBDA_DIS * loss4
                    else:  # Eq. 4: KL(p_l ‖ p_g) on f̃, p_g = θ(t)[l:](f̃)
                        p_l, p_g = F.softmax(mix_logit / TAU, 1), F.softmax(glob.head(mix_x) / TAU, 1)
                        loss4 = TAU**2 * (p_l * (p_l.log() - p_g.log())).sum(1).mean()
                        loss = loss2 + alpha3 * dcor + LAMBDA_DIS * loss4
                opt.zero_grad()
                loss.backward()
                opt.step()
                seen, total = seen + len(b), total + loss.item() * len(b)
                log[r]["steps"] = log[r].get("steps", 0) + 1
            states.append(params(net))
            sizes.append(len(Y))
            losses.append(total / seen)
        log[r]["train_loss"] = sum(v * n for v, n in zip(losses, sizes)) / sum(sizes)
        x_glob = [sum(s[j] * n / sum(sizes) for s, n in zip(states, sizes)) for j in range(len(x_glob))]
        new = net_at(x_glob).eval()  # send_parameters, then aggregate_features: this round's clients, θ(t+1)
        with torch.no_grad():
            feats = torch.cat([new.features(ctx.client_data(k)[0][hold[k]]) for k in selected])
        labels = torch.cat([ctx.client_data(k)[1][hold[k]] for k in selected])
        buffer = (feats, labels)
        buffers[r + 1] = buffer
        inputs = torch.cat([ctx.client_data(k)[0][hold[k]] for k in selected])
        rho = dist_corr(inputs[:RHO_ROWS], feats[:RHO_ROWS])
        log[r + 1].update(rho=rho if code else rho**2, size=len(labels), classes=torch.bincount(labels, minlength=C))
    return x_glob, buffers, log


@pytest.mark.parametrize("variant", ["code", "paper"])
def test_flea_is_the_authors_mce_dec_kl_or_the_paper_s_eq6(monkeypatch, variant):
    options = CODE if variant == "code" else PAPER
    with float64():
        ctx = tiny_context(monkeypatch)
        x0 = params(ctx.model)
        flea = build_algorithm(
            "flea",
            share_fraction=FRACTION,
            beta_a=BETA_A,
            lambda_dis=LAMBDA_DIS,
            lambda_dcor=LAMBDA_DCOR,
            tau=TAU,
            **{"lambda_ce": 0.0, **options},
        )
        monkeypatch.setattr(flea_module, "RHO_SAMPLES", RHO_ROWS)
        sampled, rows = run_rows(ctx, flea, ROUNDS)
        x, buffers, log = flea_transcription(ctx, x0, sampled, code=variant == "code")
    assert ctx.cfg.momentum > 0 and len(set(map(tuple, sampled))) > 1  # partial participation, clients change
    assert sampled[0] != sampled[1] and sampled[2] != sampled[3]  # a buffer's clients are not the round's
    assert_close(flea._buffer.features, buffers[ROUNDS][0], "F(4): round 3's clients' features under θ(4)")
    assert torch.equal(flea._buffer.labels.argmax(1), buffers[ROUNDS][1])
    assert flea._buffer.extracted_round == ROUNDS - 1 and sorted(set(flea._buffer.owner.tolist())) == sampled[2]
    assert_close(params(ctx.model), x, "global model")
    assert flea._buffer.labels.dtype == flea._buffer.features.dtype  # one-hot rows, mixed as distributions
    # what each round's row reports (Figs. 7–9): loss and steps, the first augmented batch, the buffer's ρ and classes
    for r, row in enumerate(rows, start=1):
        assert row["train_loss"] == pytest.approx(log[r]["train_loss"], rel=1e-9)
        assert row["local_steps"] == log[r]["steps"]
        if r == 1:
            assert "flea_batch" not in row and "flea_buffer_size" not in row
            continue
        client, lam, mass = log[r]["batch"]
        assert client == sampled[r - 1][0]  # the round's first augmented batch: its first client's first batch
        assert row["flea_batch"] == {
            "client": client,
            "local_classes": torch.bincount(ctx.client_data(client)[1], minlength=3).tolist(),
            "mixed_classes": [round(v, 4) for v in mass.tolist()],
            "beta": [round(v, 4) for v in lam.tolist()],
        }
        assert row["flea_buffer_size"] == log[r]["size"] > RHO_ROWS
        assert row["flea_buffer_classes"] == log[r]["classes"].tolist()
        assert row["flea_dcor_shared"] == pytest.approx(float(log[r]["rho"]), rel=1e-9)
    assert flea.state_dict()["exchanged"].dtype == torch.bool  # ξ: who exchanged with whom


def test_round_one_loss_without_buffer_follows_kd_and_dcor_options(monkeypatch):
    """Round 1 (no F(t)): Eq. 6 with f̃ = f. ``kd: mixed``: CE + λ1·τ²KL(p_l ‖ p_g)(f) + λ2·R²; ``kd: buffer`` (the
    code's KD on buffer rows only) has nothing to distil: CE + λ2·R². A one-sample batch has no dCor term."""
    with float64():
        ctx = tiny_context(monkeypatch)
        ctx.round = 1
        x, y = (t[:5] for t in ctx.client_data(1))
        teacher, model = ctx.global_model(), wiring_mlp(4, 3, 1)
        for mixed, n in ((True, 5), (False, 5), (True, 1), (False, 1)):
            flea = build_algorithm("flea", lambda_dis=LAMBDA_DIS, lambda_dcor=LAMBDA_DCOR, tau=TAU,
                                   kd="mixed" if mixed else "buffer")  # fmt: skip
            f = model.features(x[:n])
            expected = F.cross_entropy(model.head(f), y[:n])
            if n > 1:
                expected = expected + LAMBDA_DCOR * dist_corr(x[:n], f) ** 2
            if mixed:
                p_l, p_g = F.softmax(model.head(f) / TAU, 1), F.softmax(teacher.head(f) / TAU, 1)
                expected = expected + LAMBDA_DIS * TAU**2 * (p_l * (p_l.log() - p_g.log())).sum(1).mean()
            loss = flea.local_loss(model, x[:n], y[:n], LocalContext(1, [], {}), ctx)
            assert loss.item() == pytest.approx(expected.item(), rel=1e-9), (mixed, n)
    assert distance_correlation(x.float(), f.float()).dtype == torch.float32  # computed in float64, returned as x's
