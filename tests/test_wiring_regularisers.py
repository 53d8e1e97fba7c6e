"""Wiring of the regulariser baselines FedDecorr and FedGen: their real hooks through ``run_round`` on the tiny
problem of ``wiring.py``, against plain transcriptions of the authors' code (bytedance/FedDecorr ``loss.py`` and
``approach/fedavg.py``; zhuangdizhu/FedGen ``serverpFedGen.py``, ``userpFedGen.py`` and ``trainmodel/generator.py``).
The transcriptions draw FedGen's labels and noise from the streams our FedGen documents (the authors draw them with
``np.random`` and ``torch.rand``), and use each client's label counts of its data (the authors count the labels of the
round's batches, plus one)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from wiring import assert_close, batches, float64, params, run_rounds, tiny_context, wiring_mlp

from fed.algorithms import build_algorithm

ROUNDS = 3


def fresh_net(x):
    net = wiring_mlp(4, 3, 1)
    with torch.no_grad():
        for p, v in zip(net.parameters(), x):
            p.copy_(v)
    return net


def weighted_mean(states, sizes):
    return [sum(s[j] * n / sum(sizes) for s, n in zip(states, sizes)) for j in range(len(states[0]))]


# ------------------------------------------------------------------------------------------------ FedDecorr
def authors_feddecorr_loss(x):
    """bytedance/FedDecorr loss.py, FedDecorrLoss.forward."""
    N, C = x.shape
    if N == 1:
        return 0.0
    x = x - x.mean(dim=0, keepdim=True)
    x = x / torch.sqrt(1e-8 + x.var(dim=0, keepdim=True))
    corr_mat = torch.matmul(x.t(), x)
    off_diagonal = corr_mat.flatten()[:-1].view(C - 1, C + 1)[:, 1:].flatten()
    return off_diagonal.pow(2).mean() / N


def feddecorr_reference(ctx, x0, sampled, coef):
    """approach/fedavg.py's local loop with --feddecorr: loss = CE(out) + coef·FedDecorrLoss(features), features the
    penultimate output (here the tanh layer); the global model is the n_k-weighted mean."""
    x = x0
    for r, selected in enumerate(sampled, start=1):
        states, sizes = [], []
        for k in selected:
            net = fresh_net(x)
            opt = torch.optim.SGD(net.parameters(), lr=ctx.cfg.lr, momentum=ctx.cfg.momentum)
            X, Y = ctx.client_data(k)
            for b in batches(ctx, r, k):
                opt.zero_grad()
                features = net.body(X[b])
                loss = F.cross_entropy(net.classifier(features), Y[b]) + coef * authors_feddecorr_loss(features)
                loss.backward()
                opt.step()
            states.append(params(net))
            sizes.append(len(Y))
        x = weighted_mean(states, sizes)
    return x


def test_feddecorr_is_the_authors_loss_through_run_round(monkeypatch):
    with float64():
        ctx = tiny_context(monkeypatch)
        x0 = params(ctx.model)
        sampled = run_rounds(ctx, build_algorithm("feddecorr", beta=0.3), ROUNDS)
        expected = feddecorr_reference(ctx, x0, sampled, 0.3)
    assert any(len(b) == 1 for r, s in enumerate(sampled, 1) for k in s for b in batches(ctx, r, k))  # N = 1: 0
    assert_close(params(ctx.model), expected, "global model")


# ------------------------------------------------------------------------------------------------ FedGen
CODE = dict(teacher="heads", labels="uniform", noise="uniform", alpha_decay=0.98, beta=0.4, gen_ratio=True, eta=1.5)
COMMON = dict(alpha=0.7, noise_dim=3, generator_steps=3, generator_lr=0.05, batch=5)


def draw_labels(prior, counts, n, g):
    """The label draw our FedGen documents: ∝ counts (prior) or uniform over the labels with counts > 0."""
    if prior:
        return torch.multinomial(counts, n, replacement=True, generator=g)
    held = counts.nonzero().flatten()
    return held[torch.randint(len(held), (n,), generator=g)]


def authors_diversity(noises, layer):
    """FLAlgorithms/trainmodel/generator.py DiversityLoss(metric='l1').forward: noise distances 'l2'."""
    n = layer.size(0)
    layer_dist = torch.abs(layer.expand((n, n, layer.size(1))) - layer.unsqueeze(dim=1)).mean(dim=(2,))
    noise_dist = torch.pow(noises.expand((n, n, noises.size(1))) - noises.unsqueeze(dim=1), 2).mean(dim=(2,))
    return torch.exp(torch.mean(-noise_dist * layer_dist))


def fedgen_reference(ctx, x0, sampled, o, hidden):
    """serverpFedGen.train + train_generator and userpFedGen.train: each round the selected users train (with the
    generator's regulariser from the second round), then the generator takes ``generator_steps`` Adam steps against
    their models' last layers (label weights of the selected users), its lr ×0.98 after each round; the global model
    is the n_k-weighted mean. ``o`` holds the FedGen options; the paper's variants are switched in where chosen."""
    C, code_teacher, prior = ctx.num_classes, o.get("teacher") == "heads", o.get("labels", "prior") == "prior"
    rand = torch.rand if o.get("noise") == "uniform" else torch.randn
    alpha, beta, decay = o["alpha"], o.get("beta", 0.0), o.get("alpha_decay", 1.0)
    counts = [torch.bincount(ctx.client_data(k)[1], minlength=C).double() for k in range(ctx.num_clients)]
    available = sum(counts)
    torch.manual_seed(ctx.seed_int("generator-init"))
    G = nn.Sequential(nn.Linear(o["noise_dim"] + C, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, 5))
    opt = torch.optim.Adam(G.parameters(), lr=o["generator_lr"], betas=(0.9, 0.999), eps=1e-08, weight_decay=1e-2)
    sched = torch.optim.lr_scheduler.ExponentialLR(optimizer=opt, gamma=0.98)

    def generate(y, g):
        eps = rand((len(y), o["noise_dim"]), generator=g)
        return eps, G(torch.cat((eps, F.one_hot(y, C).double()), dim=1))

    def exp_lr_scheduler(glob_iter, init_lr):  # userpFedGen.exp_lr_scheduler
        return init_lr if decay == 1 else max(1e-4, init_lr * (decay ** (glob_iter // 1)))

    x = x0
    for r, selected in enumerate(sampled, start=1):
        glob_iter, users = r - 1, []
        for k in selected:  # userpFedGen.train
            net = fresh_net(x)
            opt_k = torch.optim.SGD(net.parameters(), lr=ctx.cfg.lr, momentum=ctx.cfg.momentum)
            G.eval()
            X, Y = ctx.client_data(k)
            g = ctx.rng("fedgen-client", r, k)
            for b in batches(ctx, r, k):
                opt_k.zero_grad()
                y = Y[b]
                user_output_logp = F.log_softmax(net(X[b]), dim=1)
                loss = F.nll_loss(user_output_logp, y)
                if glob_iter > 0:  # regularization = glob_iter > 0
                    generative_alpha = exp_lr_scheduler(glob_iter, alpha)
                    generative_beta = exp_lr_scheduler(glob_iter, beta)
                    sampled_y = draw_labels(prior, available, o["batch"], g)
                    gen_output = generate(sampled_y, g)[1]
                    logp = F.log_softmax(net.classifier(gen_output), dim=1)
                    teacher_loss = generative_alpha * torch.mean(F.nll_loss(logp, sampled_y, reduction="none"))
                    gen_ratio = o["batch"] / ctx.cfg.batch_size if o.get("gen_ratio") else 1.0
                    loss = loss + gen_ratio * teacher_loss
                    if beta > 0:
                        gen_output = generate(y, g)[1]
                        target_p = F.softmax(net.classifier(gen_output), dim=1).clone().detach()
                        loss = loss + generative_beta * nn.KLDivLoss(reduction="batchmean")(user_output_logp, target_p)
                loss.backward()
                opt_k.step()
            users.append((net, len(Y)))
        # train_generator, before aggregate_parameters; get_label_weights over the selected users
        user_counts = torch.stack([counts[k] for k in selected], 1)  # (labels, users)
        label_weights = user_counts / user_counts.sum(1, keepdim=True)
        qualified = user_counts.max(1).values > 0  # the authors: > 1 on counts that start at 1
        g = ctx.rng("fedgen-server", r)
        G.train()
        for _ in range(o["generator_steps"]):
            opt.zero_grad()
            y = draw_labels(prior, available if prior else qualified.double(), o["batch"], g)
            eps, gen_output = generate(y, g)
            diversity_loss = authors_diversity(eps, gen_output)
            teacher_loss, teacher_logit = 0, 0
            for user_idx, (net, _) in enumerate(users):
                weight = label_weights[y][:, user_idx].reshape(-1, 1)
                logit = net.classifier(gen_output)
                nll = F.nll_loss(F.log_softmax(logit, dim=1), y, reduction="none")
                teacher_loss = teacher_loss + torch.mean(nll * weight)  # (B,)·(B, 1): broadcast to B×B, as theirs
                teacher_logit = teacher_logit + logit * weight.expand(-1, C)
            if not code_teacher:  # the paper: CE of the weighted ensemble of the users' logits
                teacher_loss = F.cross_entropy(teacher_logit, y)
            loss = teacher_loss + o.get("eta", 1.0) * diversity_loss
            loss.backward()
            opt.step()
        sched.step()
        x = weighted_mean([params(net) for net, _ in users], [n for _, n in users])
    return x, G


@pytest.mark.parametrize("options", [COMMON, {**COMMON, **CODE}], ids=["paper", "code"])
def test_fedgen_is_the_authors_server_and_client_steps_through_run_round(monkeypatch, options):
    with float64():
        ctx = tiny_context(monkeypatch)
        x0 = params(ctx.model)
        fedgen = build_algorithm("fedgen", **options)
        sampled = run_rounds(ctx, fedgen, ROUNDS)
        x, G = fedgen_reference(ctx, x0, sampled, options, hidden=fedgen.generator.net[0].out_features)
    assert len(set(map(tuple, sampled))) > 1 and options["batch"] > 1
    assert_close(params(ctx.model), x, "global model")
    assert_close(dict(fedgen.generator.net.state_dict()), dict(G.state_dict()), "generator")
