"""Wiring of FedAvg, FedBR, CCVR, FedData, Fed-ZDAC, Fed-ZDAS and centralized training: their real hooks through
``run_round`` on the tiny problem of ``wiring.py``, against plain transcriptions of the reference updates:

- FedAvg: McMahan et al. 2017, w ← Σ_k (n_k/n) w_k (or the simple mean), BN buffers averaged like parameters;
- FedBR: the authors' ``FedBR.update`` (LINs-lab/FedBR, fedbr/algorithms.py): a discriminator (our projection P)
  SGD step on log p(global | local pseudo-features), then the model's SGD step on CE + μ·ℓ_con + λ·CE(·, uniform);
- CCVR: Luo et al. 2021, class Gaussians of the global model's penultimate features pooled over every client,
  virtual features drawn from them, the last layer re-trained with the rest frozen at the calibration round;
- FedData: FLea's description (App. C): every client shares a fraction of its raw samples once; the gathered data
  go to the clients, which train on them mixed with their own;
- Fed-ZDAC / Fed-ZDAS: Hao et al. 2021, Eq. 3 and Algorithms 1–3;
- centralized: SGD on the pooled training data.
"""

import copy
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from wiring import CFG, assert_close, batches, float64, run_rounds, tiny_context, tiny_data, wiring_mlp

from fed.algorithms import build_algorithm
from fed.algorithms.ccvr import CCVR, class_statistics, combine_statistics
from fed.algorithms.fedbr import FedBR
from fed.algorithms.feddata import FedData
from fed.context import Context
from fed.models import MODELS
from fed.models.base import SequentialSplit

ROUNDS = 3
# With BatchNorm a batch of one sample cannot train: client sizes whose last batch of 4 is never 1 (also with the
# 3 classes × 2 synthetic samples Fed-ZDAC adds).
BN_SIZES = (6, 10, 8, 6, 10)


def bn_mlp(in_channels: int, num_classes: int, image_size: int, hidden: int = 5) -> SequentialSplit:
    """wiring_mlp with a BatchNorm layer before the tanh: ZSDG's inversion target, BN buffers to aggregate."""
    dim = in_channels * image_size * image_size
    body = nn.Sequential(nn.Flatten(), nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.Tanh())
    return SequentialSplit(body, nn.Linear(hidden, num_classes))


def bn_context(monkeypatch, **changes) -> Context:
    """``tiny_context`` with ``bn_mlp`` on clients of ``BN_SIZES``."""
    monkeypatch.setitem(MODELS, "wiring_mlp", bn_mlp)
    train, test, partition = tiny_data(sizes=BN_SIZES)
    return Context(replace(CFG, **changes), train, test, partition, seed=3, device=torch.device("cpu"))


# ------------------------------------------------------------------ plain transcriptions shared by the tests
def state_of(net: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def fedavg_aggregate(states: list[dict], n: list[float]) -> dict:
    """McMahan et al.: w = Σ_k (n_k / n) w_k for every float entry (BN running statistics included); BN's integer
    step counter is averaged the same way and rounded."""
    out = {}
    for key in states[0]:
        v = sum(s[key].double() * (n_k / sum(n)) for s, n_k in zip(states, n))
        out[key] = v.round().long() if key.endswith("num_batches_tracked") else v
    return out


def sgd(net, params, x, y, order, f, lr, momentum):
    """Plain mini-batch SGD with momentum on CE(f(x), y) over the index batches ``order`` (``net`` in train mode)."""
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum)
    net.train()
    for b in order:
        opt.zero_grad()
        F.cross_entropy(f(x[b]), y[b]).backward()
        opt.step()


def shuffled(g: torch.Generator, n: int, epochs: int, size: int) -> list[torch.Tensor]:
    return [b for _ in range(epochs) for b in torch.randperm(n, generator=g).split(size)]


def local_ce(ctx, state, make, r, k, x=None, y=None):
    """A client's local update from ``state``: E epochs of SGD (lr, momentum) on CE over its data (or x, y)."""
    net = make(4, 3, 1)
    net.load_state_dict(state)
    if x is None:
        x, y = ctx.client_data(k)
        order = batches(ctx, r, k)
    else:
        order = shuffled(ctx.rng("shuffle", r, k), len(y), ctx.cfg.local_epochs, ctx.cfg.batch_size)
    sgd(net, net.parameters(), x, y, order, net, ctx.cfg.lr, ctx.cfg.momentum)
    return state_of(net), len(y)


def aggregate_weights(ctx, n):
    return n if ctx.cfg.aggregation == "weighted" else [1.0] * len(n)


def assert_state(actual: dict, expected: dict, what: str) -> None:
    assert actual.keys() == expected.keys(), what
    for k in expected:
        if k.endswith("num_batches_tracked"):
            assert int(actual[k]) == int(expected[k]), f"{what}[{k}]: {int(actual[k])} != {int(expected[k])}"
        else:
            assert_close(actual[k], expected[k].to(actual[k].dtype), f"{what}[{k}]")


def check_sampling(ctx, sampled):
    assert ctx.cfg.momentum > 0 and ctx.cfg.batch_size > 1 and len(set(map(tuple, sampled))) > 1
    assert all(len(s) < ctx.num_clients for s in sampled)


# ------------------------------------------------------------------ FedAvg
@pytest.mark.parametrize("aggregation", ["weighted", "mean"])
def test_fedavg_is_mcmahan_s_average(monkeypatch, aggregation):
    with float64():
        ctx = tiny_context(monkeypatch, aggregation=aggregation)
        state = state_of(ctx.model)
        sampled = run_rounds(ctx, build_algorithm("fedavg"), ROUNDS)
        for r, selected in enumerate(sampled, start=1):
            states, n = zip(*[local_ce(ctx, state, wiring_mlp, r, k) for k in selected])
            state = fedavg_aggregate(list(states), aggregate_weights(ctx, n))
    check_sampling(ctx, sampled)
    assert len({len(ctx.train_idx[k]) for s in sampled for k in s}) > 1  # unequal n_k: weighted ≠ mean
    assert_state(state_of(ctx.model), state, "global model")
    assert_state(ctx.global_state, state, "global state")


def test_fedavg_averages_bn_buffers_like_parameters(monkeypatch):
    with float64():
        ctx = bn_context(monkeypatch)
        state = state_of(ctx.model)
        sampled = run_rounds(ctx, build_algorithm("fedavg"), ROUNDS)
        rounded = False
        for r, selected in enumerate(sampled, start=1):
            states, n = zip(*[local_ce(ctx, state, bn_mlp, r, k) for k in selected])
            steps = sum(int(s["body.2.num_batches_tracked"]) * n_k for s, n_k in zip(states, n)) / sum(n)
            rounded |= steps != round(steps)
            state = fedavg_aggregate(list(states), aggregate_weights(ctx, n))
    check_sampling(ctx, sampled)
    assert rounded  # some round's clients took different numbers of steps: their weighted mean was rounded
    assert_state(state_of(ctx.model), state, "global model with BN buffers")


# ------------------------------------------------------------------ centralized
def test_centralized_is_sgd_on_the_pooled_data(monkeypatch):
    with float64():
        ctx = tiny_context(monkeypatch)
        state = state_of(ctx.model)
        sampled = run_rounds(ctx, build_algorithm("centralized"), ROUNDS)
        net = wiring_mlp(4, 3, 1)
        net.load_state_dict(state)
        x = torch.cat([ctx.client_data(k)[0] for k in range(ctx.num_clients)])
        y = torch.cat([ctx.client_data(k)[1] for k in range(ctx.num_clients)])
        for r in range(1, ROUNDS + 1):  # a round: E epochs over all samples (a fresh optimiser each round)
            order = shuffled(ctx.rng("shuffle", r, -1), len(y), ctx.cfg.local_epochs, ctx.cfg.batch_size)
            sgd(net, net.parameters(), x, y, order, net, ctx.cfg.lr, ctx.cfg.momentum)
    assert sampled == [[-1]] * ROUNDS and len(y) == sum(ctx.client_sizes())
    assert_state(state_of(ctx.model), state_of(net), "centralized model")


# ------------------------------------------------------------------ FedData
@pytest.mark.parametrize("own_share", [True, False, None])
def test_feddata_clients_train_on_their_data_and_the_gathered_share(monkeypatch, own_share):
    """FLea App. C: "the server waits until all the clients have shared 10% of their local data in the beginning
    round. The gathered data will be sent to clients to mix with local data"; a client's share is a random
    ⌈α·n_k⌉-subset of its samples (without replacement). ``own_share`` None: not given, the default (all the
    gathered data, the client's own share included)."""
    alpha = 0.3
    with float64():
        ctx = tiny_context(monkeypatch)
        state = state_of(ctx.model)
        given = {} if own_share is None else {"own_share": own_share}
        feddata = build_algorithm("feddata", share_fraction=alpha, **given)
        own_share = own_share is not False
        sampled = run_rounds(ctx, feddata, ROUNDS)
        shares = []
        for k in range(ctx.num_clients):
            n_k = len(ctx.train_idx[k])
            shares.append(
                ctx.train_idx[k][torch.randperm(n_k, generator=ctx.rng("share", k))[: math.ceil(alpha * n_k)]]
            )
        for r, selected in enumerate(sampled, start=1):
            results = []
            for k in selected:
                received = [s for j, s in enumerate(shares) if own_share or j != k]
                x, y = ctx.samples(torch.cat([ctx.train_idx[k], *received]))
                results.append(local_ce(ctx, state, wiring_mlp, r, k, x, y))
            state = fedavg_aggregate([s for s, _ in results], aggregate_weights(ctx, [n for _, n in results]))
    check_sampling(ctx, sampled)
    assert ctx.ledger["raw_samples"] == sum(len(s) for s in shares)
    assert all(len(set(s.tolist())) == len(s) for s in shares)
    assert_state(state_of(ctx.model), state, "global model")


# ------------------------------------------------------------------ FedAvg, step-matched to FedData
def test_step_matched_fedavg_trains_its_own_data_for_feddata_s_steps(monkeypatch):
    """docs/headtohead-protocol.md, section 4: client k trains E_k = ⌈E·⌈(n_k + S_k)/B⌉ / ⌈n_k/B⌉⌉ epochs of FedAvg on
    its own data, S_k = Σ_j ⌈α·n_j⌉. On the wiring problem (n = 6, 9, 7, 8, 6; B = 4; E = 2; α = 0.3): S = 2+3+3+3+2
    = 13, so E_k = ⌈2·5/2⌉, ⌈2·6/3⌉, ⌈2·5/2⌉, ⌈2·6/2⌉, ⌈2·5/2⌉ = 5, 4, 5, 6, 5, by hand; FedData's steps are 10, 12,
    10, 12, 10 and the matched ones 10, 12, 10, 12, 10: equal here."""
    epochs = [5, 4, 5, 6, 5]
    with float64():
        ctx = tiny_context(monkeypatch)
        state = state_of(ctx.model)
        matched = build_algorithm("fedavg_matched", share_fraction=0.3)
        assert [matched.epochs(ctx, k) for k in range(ctx.num_clients)] == epochs
        sampled = run_rounds(ctx, matched, ROUNDS)
        for r, selected in enumerate(sampled, start=1):
            results = []
            for k in selected:
                x, y = ctx.client_data(k)
                order = shuffled(ctx.rng("shuffle", r, k), len(y), epochs[k], ctx.cfg.batch_size)
                net = wiring_mlp(4, 3, 1)
                net.load_state_dict(state)
                sgd(net, net.parameters(), x, y, order, net, ctx.cfg.lr, ctx.cfg.momentum)
                results.append((state_of(net), len(y)))
            state = fedavg_aggregate([s for s, _ in results], aggregate_weights(ctx, [n for _, n in results]))
    assert_state(state_of(ctx.model), state, "global model")
    # without its own share client 3 (n = 8) receives 13 − 3 = 10 records: ⌈2·⌈18/4⌉/⌈8/4⌉⌉ = 5 epochs, not 6
    assert build_algorithm("fedavg_matched", share_fraction=0.3, own_share=False).epochs(ctx, 3) == 5


# ------------------------------------------------------------------ FedBR
class FedBRNet(nn.Module):
    """The authors' FedBR network: featurizer φ, classifier, discriminator P (our ``extras.projection``)."""

    def __init__(self, width):
        super().__init__()
        base = wiring_mlp(4, 3, 1)
        self.body, self.classifier = base.body, base.classifier
        self.P = nn.Sequential(
            nn.Linear(5, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)
        )

    def load(self, state):
        self.load_state_dict({k.replace("extras.projection", "P"): v for k, v in state.items()})

    def state(self):
        return {
            k.replace("P.", "extras.projection.", 1) if k.startswith("P.") else k: v for k, v in state_of(self).items()
        }


@pytest.mark.parametrize("mixture", [False, True, None])
def test_fedbr_is_the_authors_min_max_update(monkeypatch, mixture):
    """``mixture`` None: not given, the default (the paper's pseudo-data with uniform targets, no Mixture)."""
    lam_cls, lam_con, tau, M, B_p, width = 0.7, 0.3, 0.4, 3, 5, 6
    with float64():
        fedbr = build_algorithm(
            "fedbr",
            **{"lam_cls": lam_cls, "lam_con": lam_con, "tau": tau, "mean_batch": M, "pseudo_batch": B_p,
             "projection_dim": width, **({} if mixture is None else {"mixture": mixture})},
        )  # fmt: skip
        mixture = bool(mixture)
        ctx = tiny_context(monkeypatch, extra_modules=fedbr.extra_modules)
        state = state_of(ctx.model)
        sampled = run_rounds(ctx, fedbr, ROUNDS)

        # pseudo-data shared once: every client's samples in a random order, means of groups of M
        x_bar, owner = [], []
        for k in range(ctx.num_clients):
            x, _ = ctx.client_data(k)
            for g in torch.randperm(len(x), generator=ctx.rng("share", k)).split(M):
                x_bar.append(x[g].mean(0))
                owner.append(k)
        x_bar, owner = torch.stack(x_bar), torch.tensor(owner)

        def log_p_global(P, z_p, z_g, z_l):
            """log( e^{sim(P z_p, P z_g)/τ} / (e^{sim(P z_p, P z_g)/τ} + e^{sim(P z_p, P z_l)/τ}) ), per sample."""
            e1, e2, e3 = P(z_p), P(z_g), P(z_l)
            s12, s13 = torch.cosine_similarity(e1, e2, dim=1) / tau, torch.cosine_similarity(e1, e3, dim=1) / tau
            return torch.log(torch.exp(s12) / (torch.exp(s12) + torch.exp(s13)))

        for r, selected in enumerate(sampled, start=1):
            glob = FedBRNet(width)
            glob.load(state)
            glob.eval()
            results = []
            for k in selected:
                net = FedBRNet(width)
                net.load(state)
                gen_opt = torch.optim.SGD(
                    [*net.body.parameters(), *net.classifier.parameters()], lr=ctx.cfg.lr, momentum=ctx.cfg.momentum
                )
                disc_opt = torch.optim.SGD(net.P.parameters(), lr=ctx.cfg.lr)
                pool = torch.nonzero(owner != k).flatten()
                mix = ctx.rng("mix", r, k)
                x, y = ctx.client_data(k)
                for b in batches(ctx, r, k):
                    x_p = x_bar[pool[torch.randint(len(pool), (B_p,), generator=mix)]]
                    q = torch.full((B_p, 3), 1.0 / 3)  # the classifier-balance target: uniform
                    if mixture:  # get_unlabeled_by_self: mixed with a random sample of the batch, label mixed too
                        j = torch.randint(len(b), (B_p,), generator=mix)
                        x_p, q = (x_p + x[b][j]) / 2, (q + F.one_hot(y[b][j], 3)) / 2
                    z_p, z_self = net.body(x_p), net.body(x[b])
                    with torch.no_grad():
                        z_g = glob.body(x_p)
                    z_l = z_self.mean(0, keepdim=True).expand(B_p, -1)  # our negative view (docs/deviations.md)
                    # max step: the discriminator descends on +log p, i.e. ascends on ℓ_con
                    disc_loss = log_p_global(net.P, z_p.detach(), z_g, z_l.detach()).mean()
                    disc_opt.zero_grad()
                    disc_loss.backward()
                    disc_opt.step()
                    # min step with the updated P; only φ and the classifier move
                    con = -log_p_global(net.P, z_p, z_g, z_l).mean()
                    ce = F.cross_entropy(net.classifier(z_self), y[b])
                    aug = -(F.log_softmax(net.classifier(z_p), 1) * q).sum(1).mean()
                    gen_opt.zero_grad()
                    (ce + lam_con * con + lam_cls * aug).backward()
                    gen_opt.step()
                results.append((net.state(), len(y)))
            state = fedavg_aggregate([s for s, _ in results], aggregate_weights(ctx, [n for _, n in results]))
    check_sampling(ctx, sampled)
    assert_state(state_of(ctx.model), state, "global model and projection")


# ------------------------------------------------------------------ CCVR
@pytest.mark.parametrize(
    "source,calibrate,f", [("gaussian", 2, 0.4), ("features", 2, 0.4), ("features", 2, 0.25), (None, None, 0.4)]
)
def test_ccvr_calibrates_the_classifier_on_virtual_features(monkeypatch, source, calibrate, f):
    """``source``/``calibrate`` None: not given, the defaults (the paper: Gaussians, after the last round). With
    f = 0.25 a client of 6–9 samples shares ⌊f n⌋ = 1 or 2 representations (FLea's count; round(f n) would be 2)."""
    M, epochs, lr = 7, 2, 0.3
    with float64():
        ctx = tiny_context(monkeypatch)
        state = state_of(ctx.model)
        given = {"calibrate_round": calibrate, "source": source}
        ccvr = build_algorithm(
            "ccvr",
            **{"virtual_per_class": M, "epochs": epochs, "lr": lr, "feature_fraction": f,
               **{k: v for k, v in given.items() if v is not None}},
        )  # fmt: skip
        source, calibrate = source or "gaussian", calibrate or ctx.cfg.rounds
        assert calibrate <= ROUNDS == ctx.cfg.rounds
        sampled = run_rounds(ctx, ccvr, calibrate)
        after_calibration = state_of(ctx.model)
        sampled += run_rounds(ctx, ccvr, ROUNDS - calibrate)  # CCVR's setup does nothing: this continues the run

        for r, selected in enumerate(sampled, start=1):
            states, n = zip(*[local_ce(ctx, state, wiring_mlp, r, k) for k in selected])
            state = fedavg_aggregate(list(states), aggregate_weights(ctx, n))
            if r != calibrate:
                continue
            net = wiring_mlp(4, 3, 1)
            net.load_state_dict(state)
            net.eval()
            with torch.no_grad():
                if source == "gaussian":  # every client's class statistics, pooled: the class Gaussians
                    z = torch.cat([net.body(ctx.client_data(k)[0]) for k in range(ctx.num_clients)])
                    y = torch.cat([ctx.client_data(k)[1] for k in range(ctx.num_clients)])
                    g, zs, ys = ctx.rng("virtual", r), [], []
                    for c in sorted(y.unique().tolist()):
                        mu, sigma = z[y == c].mean(0), torch.cov(z[y == c].T)
                        evals, evecs = torch.linalg.eigh(sigma)
                        root = evecs * evals.clamp_min(0).sqrt()  # root rootᵀ = Σ_c
                        zs.append(mu + torch.randn(M, len(mu), generator=g) @ root.T)
                        ys.append(torch.full((M,), c))
                    z_v, y_v = torch.cat(zs), torch.cat(ys)
                else:  # FLea App. C: the features of a fraction of every client's samples
                    zs, ys = [], []
                    for k in range(ctx.num_clients):
                        x, y = ctx.client_data(k)
                        pick = torch.randperm(len(y), generator=ctx.rng("ccvr-share", k))[: math.floor(f * len(y))]
                        zs.append(net.body(x[pick]))
                        ys.append(y[pick])
                    z_v, y_v = torch.cat(zs), torch.cat(ys)
            order = shuffled(ctx.rng("calibrate", r), len(y_v), epochs, ctx.cfg.batch_size)
            sgd(net, net.classifier.parameters(), z_v, y_v, order, net.classifier, lr, 0.0)
            calibrated = state_of(net)
            assert_state(after_calibration, calibrated, "model after calibration")
            for key in ("body.1.weight", "body.1.bias"):  # the rest frozen
                assert_close(after_calibration[key], state[key], key)
            assert not torch.allclose(after_calibration["classifier.weight"], state["classifier.weight"])
            state = calibrated
    check_sampling(ctx, sampled)
    assert_state(state_of(ctx.model), state, "global model")


def test_ccvr_gaussians_of_one_and_two_samples_by_hand():
    """Luo et al.'s pooled class Gaussian where a class has one or two samples (in float32 runs too): one sample
    a gives N(a, 0), so every virtual feature is a; two samples a, b (one per client) give
    N((a + b)/2, (a − b)(a − b)ᵀ/2), so every virtual feature lies on the line through a and b."""
    a, b = torch.tensor([[1.0, 2.0, 0.0]]), torch.tensor([[3.0, -2.0, 1.0]])
    one = class_statistics(a, torch.tensor([2]), 3)[2]
    assert one[0] == 1 and one[2].dtype == torch.float64  # the statistics are float64 whatever the model's dtype
    assert_close(one[1], a[0].double())
    assert_close(one[2], torch.zeros(3, 3, dtype=torch.float64))
    n, mean, cov = combine_statistics([one])
    assert n == 1 and cov.dtype == torch.float64
    assert_close(mean, a[0].double())
    assert_close(cov, torch.zeros(3, 3, dtype=torch.float64))
    n, mean, cov = combine_statistics([one, class_statistics(b, torch.tensor([2]), 3)[2]])
    expected = torch.tensor([[2.0, -4.0, 1.0], [-4.0, 8.0, -2.0], [1.0, -2.0, 0.5]], dtype=torch.float64)
    assert n == 2 and cov.dtype == torch.float64
    assert_close(mean, torch.tensor([2.0, 0.0, 0.5], dtype=torch.float64))
    assert_close(cov, expected)

    # the same through CCVR.virtual on a float32 model: class 2 once, class 1 once per client, class 0 three times
    torch.manual_seed(0)
    model = wiring_mlp(4, 3, 1).eval()
    x = torch.randn(6, 4, 1, 1)
    data = [(x[:3], torch.tensor([0, 1, 2])), (x[3:], torch.tensor([0, 0, 1]))]
    ctx = SimpleNamespace(
        num_clients=2, num_classes=3, round=1, client_data=lambda k: data[k], share=lambda name, n: None,
        rng=lambda *key: torch.Generator().manual_seed(5),
    )  # fmt: skip
    with torch.no_grad():
        z, y = CCVR(virtual_per_class=6).virtual(ctx, model)
        h = model.embed(x).double()
    assert z.dtype == torch.float32 and y.tolist() == [0] * 6 + [1] * 6 + [2] * 6
    assert_close(z[y == 2].double(), h[2].expand(6, -1), rtol=1e-6, atol=1e-6)
    d, mu = h[1] - h[5], (h[1] + h[5]) / 2
    t = (z[y == 1].double() - mu) @ d / (d @ d)
    assert_close(z[y == 1].double(), mu + t[:, None] * d, rtol=1e-6, atol=1e-6)
    assert t.abs().min() > 1e-3  # spread along a − b, not collapsed on the mean


def test_ccvr_and_feddata_validate_their_options():
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"CCVR: feature_fraction must be in \(0, 1\], got"):
            CCVR(feature_fraction=bad)
        with pytest.raises(ValueError, match=r"FedData: share_fraction must be in \(0, 1\], got"):
            FedData(share_fraction=bad)
    with pytest.raises(ValueError, match="CCVR: source must be 'gaussian' \\(the paper\\) or 'features'"):
        CCVR(source="GAUSSIAN")
    # 1 is allowed (everything shared); the defaults are valid: the paper's Gaussians, FLea's 10 % of raw samples
    assert CCVR(feature_fraction=1.0).feature_fraction == 1.0 and FedData(share_fraction=1.0).share_fraction == 1.0
    assert CCVR().source == "gaussian" and FedData().share_fraction == 0.1


def test_fedbr_projection_reads_the_penultimate_representation():
    """P maps ``embed`` (the input of the last linear layer), not the cut's ``features``: here 6-d vs 5-d."""
    head = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 3))
    model = SequentialSplit(nn.Sequential(nn.Flatten(), nn.Linear(4, 5), nn.Tanh()), head)
    projection = FedBR(projection_dim=7).extra_modules(model, (4, 1, 1))["projection"]
    x = torch.randn(2, 4, 1, 1)
    assert model.features(x).shape[1] == 5 and model.embed(x).shape[1] == 6
    assert projection(model.embed(x)).shape == (2, 7)


# ------------------------------------------------------------------ Fed-ZDA
ZSDG = {"per_class": 2, "iterations": 4, "lr": 0.05}


def zsdg_eq3(model: nn.Module, g: torch.Generator, per_class=ZSDG["per_class"], iterations=ZSDG["iterations"]):
    """Algorithm 1: labelled Gaussian inputs, all classes in one batch; Adam on the inputs only (the model fixed,
    its BN layers' stored statistics the targets) on Eq. 3:
    Σ_l ||μ̄_l − μ_l||² + ||σ̄_l − σ_l||² + H(M(x̄), ȳ), μ̄_l, σ̄_l of the batch at BN l's input (σ as BN's √(var + ε))."""
    model = copy.deepcopy(model).eval().requires_grad_(False)
    bn = [m for m in model.modules() if isinstance(m, nn.BatchNorm1d)]
    z = {}
    hooks = [m.register_forward_hook(lambda m, i, o: z.__setitem__(m, i[0])) for m in bn]
    y = torch.arange(3).repeat_interleave(per_class)
    x = torch.randn((len(y), 4, 1, 1), generator=g).requires_grad_(True)
    opt = torch.optim.Adam([x], lr=ZSDG["lr"])
    for _ in range(iterations):
        loss = F.cross_entropy(model(x), y)
        for m in bn:
            mu_bar, sigma_bar = z[m].mean(0), (z[m].var(0, unbiased=False) + m.eps).sqrt()
            loss = loss + (mu_bar - m.running_mean).pow(2).sum()
            loss = loss + (sigma_bar - (m.running_var + m.eps).sqrt()).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    for h in hooks:
        h.remove()
    return x.detach(), y


@pytest.mark.parametrize("batch_clients", [False, True])
def test_fedzdac_is_algorithm_2(monkeypatch, batch_clients):
    start = 2
    with float64():
        ctx = bn_context(monkeypatch)
        state = state_of(ctx.model)
        zdac = build_algorithm("fedzdac", **{"start_round": start, "zsdg": ZSDG, "batch_clients": batch_clients})
        sampled = run_rounds(ctx, zdac, ROUNDS)
        for r, selected in enumerate(sampled, start=1):
            glob = bn_mlp(4, 3, 1)
            glob.load_state_dict(state)  # M_G,t−1, which every selected client receives
            results = []
            for k in selected:
                x, y = ctx.client_data(k)
                if r >= start:  # line 6: ZSDG from M_G,t−1; line 7: update M_G,t−1 on the real and fake data
                    x_fake, y_fake = zsdg_eq3(glob, ctx.rng("zsdg", r, k))
                    x, y = torch.cat([x, x_fake]), torch.cat([y, y_fake])
                results.append(local_ce(ctx, state, bn_mlp, r, k, x, y))
            state = fedavg_aggregate([s for s, _ in results], aggregate_weights(ctx, [n for _, n in results]))
    check_sampling(ctx, sampled)
    assert_state(state_of(ctx.model), state, "global model")


@pytest.mark.parametrize("keep_bn_statistics", [True, False, None])
def test_fedzdas_is_algorithm_3(monkeypatch, keep_bn_statistics):
    """keep_bn_statistics None: not set, the default keeps them. server_epochs 3 ≠ the clients' E = 2."""
    start, server_epochs, server_lr = 2, 3, 0.07
    keep = {} if keep_bn_statistics is None else {"keep_bn_statistics": keep_bn_statistics}
    with float64():
        ctx = bn_context(monkeypatch)
        state = state_of(ctx.model)
        zdas = build_algorithm(
            "fedzdas",
            **{"start_round": start, "zsdg": ZSDG, "server_epochs": server_epochs, "server_lr": server_lr, **keep},
        )  # fmt: skip
        sampled = run_rounds(ctx, zdas, ROUNDS)
        for r, selected in enumerate(sampled, start=1):
            results = [local_ce(ctx, state, bn_mlp, r, k) for k in selected]  # line 6: real data only
            state = fedavg_aggregate([s for s, _ in results], aggregate_weights(ctx, [n for _, n in results]))
            if r < start:
                continue
            fakes = []
            for k, (client_state, _) in zip(selected, results):  # line 8: ZSDG from each received M_i,t
                source = bn_mlp(4, 3, 1)
                source.load_state_dict(client_state)
                fakes.append(zsdg_eq3(source, ctx.rng("zsdg", r, k)))
            x, y = (torch.cat(parts) for parts in zip(*fakes))  # line 9: the combined balanced set
            net = bn_mlp(4, 3, 1)
            net.load_state_dict(state)  # line 10: the interim M̃_G,t; line 11: trained on the combined set
            order = shuffled(ctx.rng("server", r), len(y), server_epochs, ctx.cfg.batch_size)
            sgd(net, net.parameters(), x, y, order, net, server_lr, ctx.cfg.momentum)
            trained = state_of(net)
            if keep_bn_statistics is not False:  # the aggregate's running statistics (of real data) kept
                trained.update({k: v for k, v in state.items() if "running" in k or "num_batches" in k})
            state = trained
    check_sampling(ctx, sampled)
    assert_state(state_of(ctx.model), state, "global model")


def test_ccvr_features_that_share_nothing_say_so(monkeypatch):
    """⌊f n⌋ = 0 for every client of 6–9 samples at f = 0.1: no representation to calibrate on is an error that says
    why, not an empty layer fit."""
    with float64():
        ctx = tiny_context(monkeypatch)
        ccvr = build_algorithm("ccvr", source="features", feature_fraction=0.1, calibrate_round=1)
        with pytest.raises(ValueError, match="shares no representation"):
            run_rounds(ctx, ccvr, 1)
