"""Wiring of the regulariser baselines FedDecorr and FedGen: their real hooks through ``run_round`` on the tiny
problem of ``wiring.py``, against plain transcriptions of the authors' code (bytedance/FedDecorr ``loss.py`` and
``approach/fedavg.py``; zhuangdizhu/FedGen ``serverpFedGen.py``, ``userpFedGen.py`` and ``trainmodel/generator.py``).
The transcriptions draw FedGen's labels and noise from the streams our FedGen documents (the authors draw them with
``np.random`` and ``torch.rand``), and use each client's label counts of its data (the authors count the labels of the
round's batches, plus one). FedGen also runs FLea's options (``start_round``; ``space: cut`` with ``generator: conv``
on ``cut_model``, whose cut is not its penultimate layer) and is checked through a checkpoint."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn
from wiring import (
    CFG,
    assert_close,
    batches,
    float64,
    load,
    params,
    run_rounds,
    tiny_context,
    tiny_data,
    weighted_mean,
    wiring_mlp,
)

from fed.algorithms import build_algorithm
from fed.algorithms.feddecorr import decorrelation_loss
from fed.algorithms.fedgen import label_weights
from fed.context import Context
from fed.models import MODELS
from fed.models.base import SequentialSplit

ROUNDS = 3
CUT = (1, 9, 2)  # cut_model's feature map


def cut_model(in_channels: int, num_classes: int, image_size: int) -> SequentialSplit:
    """A model whose cut is not its penultimate layer: ``features`` is Linear 4→18 + tanh shaped as a 1×9×2 map,
    ``head`` Flatten + Linear 18→5 + tanh + Linear 5→C (so ``embed`` is the 5-dim tanh output)."""
    dim = in_channels * image_size * image_size
    return SequentialSplit(
        nn.Sequential(nn.Flatten(), nn.Linear(dim, 18), nn.Tanh(), nn.Unflatten(1, CUT)),
        nn.Sequential(nn.Flatten(), nn.Linear(18, 5), nn.Tanh(), nn.Linear(5, num_classes)),
    )


def context(monkeypatch, model=wiring_mlp, num_classes=3) -> Context:
    """``tiny_context`` with ``model``, on ``tiny_data`` of ``num_classes`` labels."""
    if num_classes == 3:
        return tiny_context(monkeypatch, model=model)
    monkeypatch.setitem(MODELS, "wiring_mlp", model)
    return Context(CFG, *tiny_data(num_classes=num_classes), seed=3, device=torch.device("cpu"))


def fresh_net(x, model=wiring_mlp, num_classes=3):
    return load(model(4, num_classes, 1), x)


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


def paper_decorrelation(z):
    """The FedDecorr paper's form: K = ẑᵀẑ / N the batch's correlation matrix (ẑ standardised with the population
    variance, the 1e-8 of the authors' code under the square root), L = ‖K‖_F² / d², the diagonal included."""
    n, d = z.shape
    centred = z - z.mean(0)
    zhat = centred / torch.sqrt(centred.pow(2).mean(0) + 1e-8)
    K = zhat.T @ zhat / n
    return K.pow(2).sum() / d**2


def feddecorr_reference(ctx, x0, sampled, coef, decorrelation=authors_feddecorr_loss):
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
                loss = F.cross_entropy(net.classifier(features), Y[b]) + coef * decorrelation(features)
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


def test_feddecorr_paper_form_through_run_round(monkeypatch):
    with float64():
        ctx = tiny_context(monkeypatch)
        x0 = params(ctx.model)
        sampled = run_rounds(ctx, build_algorithm("feddecorr", beta=0.3, form="paper"), ROUNDS)
        expected = feddecorr_reference(ctx, x0, sampled, 0.3, paper_decorrelation)
        # by hand: two identical dimensions are perfectly correlated, K = [[1, 1], [1, 1]], L = 4 / 2² = 1
        same = torch.tensor([[0.0, 0.0], [1.0, 1.0], [3.0, 3.0]])
        assert decorrelation_loss(same, "paper").item() == pytest.approx(1.0, rel=1e-7)
    assert_close(params(ctx.model), expected, "global model")
    with pytest.raises(ValueError, match=r"feddecorr: form code\|paper"):
        build_algorithm("feddecorr", form="Paper")


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


def conv_generator_transcription(inputs):
    """FLea App. C's "four ConvTranspose2d layers" as our ``generator: conv`` documents them, written out for
    ``CUT`` = 1×9×2: from a 1×1 map to an eighth of 9×2 rounded up (2×1), three doublings (16×8), cropped to 9×2."""
    return nn.Sequential(
        nn.ConvTranspose2d(inputs, 128, (2, 1)), nn.BatchNorm2d(128), nn.ReLU(),
        nn.ConvTranspose2d(128, 64, 4, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.ConvTranspose2d(32, 1, 4, stride=2, padding=1),
    )  # fmt: skip


def fedgen_reference(ctx, x0, sampled, o, model=wiring_mlp):
    """serverpFedGen.train + train_generator and userpFedGen.train: each round the selected users train (with the
    generator's regulariser once it has been trained), then the generator takes ``generator_steps`` Adam steps
    against their models' last layers (label weights of the selected users), its lr ×0.98 after each training; the
    global model is the n_k-weighted mean. ``o`` holds the FedGen options; the paper's variants are switched in where
    chosen, and FLea's (``start_round``: FedAvg before it; ``space: cut``, ``generator: conv``: feature maps at the
    cut, scored by the whole head). Returns the global model, the generator, its Adam, the last round's mean
    generator loss and the number of generator trainings."""
    C, code_teacher, prior = ctx.num_classes, o.get("teacher") == "heads", o.get("labels", "prior") == "prior"
    rand = torch.rand if o.get("noise") == "uniform" else torch.randn
    alpha, beta, decay = o["alpha"], o.get("beta", 0.0), o.get("alpha_decay", 1.0)
    cut, conv = o.get("space") == "cut", o.get("generator") == "conv"
    shape = CUT if cut else (5,)  # both models' penultimate layer has 5 units
    counts = [torch.bincount(ctx.client_data(k)[1], minlength=C).double() for k in range(ctx.num_clients)]
    available = sum(counts)
    torch.manual_seed(ctx.seed_int("generator-init"))
    if conv:
        G = conv_generator_transcription(o["noise_dim"] + C)
    else:  # hidden 256: the authors' GENERATORCONFIGS['mnist'] (utils/model_config.py)
        hidden = o.get("hidden", 256)
        G = nn.Sequential(nn.Linear(o["noise_dim"] + C, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                          nn.Linear(hidden, torch.Size(shape).numel()))  # fmt: skip
    opt = torch.optim.Adam(G.parameters(), lr=o["generator_lr"], betas=(0.9, 0.999), eps=1e-08, weight_decay=1e-2)
    sched = torch.optim.lr_scheduler.ExponentialLR(optimizer=opt, gamma=0.98)

    def generate(y, g):
        eps = rand((len(y), o["noise_dim"]), generator=g)
        z = torch.cat((eps, F.one_hot(y, C).double()), dim=1)
        return eps, (G(z[:, :, None, None])[:, :, : shape[1], : shape[2]] if conv else G(z).view(len(y), *shape))

    def last_layer(net, h):  # the authors' model(h, start_layer_idx=-1); at the cut: the whole head
        if cut:
            return net.classifier(h)
        return net.classifier[-1](h) if isinstance(net.classifier, nn.Sequential) else net.classifier(h)

    def exp_lr_scheduler(glob_iter, init_lr):  # userpFedGen.exp_lr_scheduler
        return init_lr if decay == 1 else max(1e-4, init_lr * (decay ** (glob_iter // 1)))

    x, trained, trainings, metric = x0, False, 0, None
    for r, selected in enumerate(sampled, start=1):
        glob_iter, users = r - 1, []
        for k in selected:  # userpFedGen.train
            net = fresh_net(x, model, C)
            opt_k = torch.optim.SGD(net.parameters(), lr=ctx.cfg.lr, momentum=ctx.cfg.momentum)
            G.eval()
            X, Y = ctx.client_data(k)
            g = ctx.rng("fedgen-client", r, k)
            for b in batches(ctx, r, k):
                opt_k.zero_grad()
                y = Y[b]
                user_output_logp = F.log_softmax(net(X[b]), dim=1)
                loss = F.nll_loss(user_output_logp, y)
                if trained:  # the authors' regularization = glob_iter > 0: from the round after the first training
                    generative_alpha = exp_lr_scheduler(glob_iter, alpha)
                    generative_beta = exp_lr_scheduler(glob_iter, beta)
                    sampled_y = draw_labels(prior, available, o["batch"], g)
                    gen_output = generate(sampled_y, g)[1]
                    logp = F.log_softmax(last_layer(net, gen_output), dim=1)
                    teacher_loss = generative_alpha * torch.mean(F.nll_loss(logp, sampled_y, reduction="none"))
                    gen_ratio = o["batch"] / ctx.cfg.batch_size if o.get("gen_ratio") else 1.0
                    loss = loss + gen_ratio * teacher_loss
                    if beta > 0:
                        gen_output = generate(y, g)[1]
                        target_p = F.softmax(last_layer(net, gen_output), dim=1).clone().detach()
                        loss = loss + generative_beta * nn.KLDivLoss(reduction="batchmean")(user_output_logp, target_p)
                loss.backward()
                opt_k.step()
            users.append((net, len(Y)))
        if r + 1 >= o.get("start_round", 1):  # FLea: FedAvg before start_round, so trained for its clients
            # train_generator, before aggregate_parameters; get_label_weights over the selected users
            user_counts = torch.stack([counts[k] for k in selected], 1)  # (labels, users)
            label_weights = user_counts / user_counts.sum(1, keepdim=True)
            qualified = user_counts.max(1).values > 0  # the authors: > 1 on counts that start at 1
            g = ctx.rng("fedgen-server", r)
            G.train()
            total = 0.0
            for _ in range(o["generator_steps"]):
                opt.zero_grad()
                y = draw_labels(prior, available if prior else qualified.double(), o["batch"], g)
                eps, gen_output = generate(y, g)
                diversity_loss = authors_diversity(eps.flatten(1), gen_output.flatten(1))
                teacher_loss, teacher_logit = 0, 0
                for user_idx, (net, _) in enumerate(users):
                    weight = label_weights[y][:, user_idx].reshape(-1, 1)
                    logit = last_layer(net, gen_output)
                    nll = F.nll_loss(F.log_softmax(logit, dim=1), y, reduction="none")
                    teacher_loss = teacher_loss + torch.mean(nll * weight)  # (B,)·(B, 1): broadcast to B×B, as theirs
                    teacher_logit = teacher_logit + logit * weight.expand(-1, C)
                if not code_teacher:  # the paper: CE of the weighted ensemble of the users' logits
                    teacher_loss = F.cross_entropy(teacher_logit, y)
                loss = teacher_loss + o.get("eta", 1.0) * diversity_loss
                loss.backward()
                opt.step()
                total += loss.item()
            sched.step()
            trained, trainings, metric = True, trainings + 1, total / o["generator_steps"]
        x = weighted_mean([params(net) for net, _ in users], [n for _, n in users])
    return x, G, opt, metric, trainings


FEDGEN_CASES = {
    "paper": (COMMON, wiring_mlp, 3),
    "code": ({**COMMON, **CODE}, wiring_mlp, 3),
    "code-label-unheld": ({**COMMON, **CODE}, wiring_mlp, 4),  # round 1's clients hold no label 2, others do
    "start-round": ({**COMMON, "start_round": 3, "generator_steps": 1}, wiring_mlp, 3),
    "penultimate-of-cut-model": (COMMON, cut_model, 3),
    "cut-conv": ({**COMMON, **CODE, "space": "cut", "generator": "conv"}, cut_model, 3),
}


@pytest.mark.parametrize("case", FEDGEN_CASES)
def test_fedgen_is_the_authors_server_and_client_steps_through_run_round(monkeypatch, case):
    options, model, num_classes = FEDGEN_CASES[case]
    with float64():
        ctx = context(monkeypatch, model, num_classes)
        x0 = params(ctx.model)
        fedgen = build_algorithm("fedgen", **options)
        sampled = run_rounds(ctx, fedgen, ROUNDS)
        x, G, opt, metric, trainings = fedgen_reference(ctx, x0, sampled, options, model)
        assert ctx.ledger["label_counts"] == ctx.num_clients  # every client's label counts, uploaded once
        resumed = build_algorithm("fedgen", **options)  # the generator, its Adam and the schedule: checkpointed
        resumed.setup(ctx)
        resumed.load_state_dict(fedgen.state_dict())
    assert len(set(map(tuple, sampled))) > 1 and options["batch"] > 1
    if num_classes == 4:
        held = [torch.bincount(ctx.client_data(k)[1], minlength=4) > 0 for k in range(ctx.num_clients)]
        assert not any(held[k][2] for k in sampled[0]) and any(h[2] for h in held)
    assert_close(params(ctx.model), x, "global model")
    assert_close(dict(fedgen.generator.net.state_dict()), dict(G.state_dict()), "generator")
    assert ctx.round_metrics["generator_loss"] == pytest.approx(metric, rel=1e-9)
    assert (resumed._trained, resumed._trainings) == (True, trainings)
    assert_close(dict(resumed.generator.net.state_dict()), dict(G.state_dict()), "generator after a checkpoint")
    assert_close(resumed.optimizer.state_dict()["state"], opt.state_dict()["state"], "Adam after a checkpoint")


def test_fedgen_label_weights_decay_and_defaults():
    # w_{k,y} = n_{k,y} / Σ_j n_{j,y}: a label one sample of one client holds weighs 1 for it, exactly
    w = label_weights(torch.tensor([[1.0, 0.0, 2.0, 0.0], [0.0, 3.0, 6.0, 0.0]], dtype=torch.float64))
    assert torch.equal(w, torch.tensor([[1.0, 0.0, 0.25, 0.0], [0.0, 1.0, 0.75, 0.0]], dtype=torch.float64))
    # α_t = α at alpha_decay 1 (no floor: α = 0 turns the term off); the code's max(1e-4, α·0.98^(t−1)) otherwise
    assert build_algorithm("fedgen", alpha_decay=1).decayed(0.0, 5) == 0.0
    assert build_algorithm("fedgen", alpha_decay=1).decayed(5e-5, 5) == 5e-5
    assert build_algorithm("fedgen", alpha_decay=0.98).decayed(0.7, 3) == pytest.approx(0.7 * 0.98**2)
    assert build_algorithm("fedgen", alpha_decay=0.98).decayed(1e-5, 3) == 1e-4
    # defaults: config.yaml's entries (a config omitting a key runs the same), and the authors' 'mnist' generator
    # (zhuangdizhu/FedGen utils/model_config.py: hidden 256, ensemble_lr 3e-4, weight_decay 1e-2; gamma 0.98)
    methods = yaml.safe_load((Path(__file__).parents[1] / "config.yaml").read_text())["methods"]
    for name in ("fedgen", "feddecorr"):
        entry = {k: v for k, v in methods[name].items() if k != "algorithm"}
        assert {k: getattr(build_algorithm(name), k) for k in entry} == entry, name
    fedgen = build_algorithm("fedgen")
    generator = (fedgen.hidden, fedgen.generator_lr, fedgen.generator_weight_decay, fedgen.generator_lr_decay)
    assert generator == (256, 3e-4, 1e-2, 0.98)
