"""A round's clients trained as one batched computation (fed.batched) compute what the loop computes: per method on
the batched path, ≥ 2 rounds both ways in float64 on the wiring problem (partial participation, clients of unequal
size so batches of unequal size, momentum > 0, weight decay), also with a BatchNorm model, and the global state, the
clients' stored state and the method's server state equal to 1e-10."""

import pytest
import torch
from torch import nn
from wiring import float64, run_rounds, tiny_context

from fed.algorithms import build_algorithm
from fed.models.base import SequentialSplit

ROUNDS = 3


def bn_mlp(in_channels: int, num_classes: int, image_size: int) -> SequentialSplit:
    """The wiring MLP with a BatchNorm layer (running statistics and num_batches_tracked per client) over 5 channels
    of length 2, so that a client's last batch of one sample still has two values a channel."""
    dim = in_channels * image_size * image_size
    features = nn.Sequential(nn.Flatten(), nn.Linear(dim, 10), nn.Unflatten(1, (5, 2)), nn.BatchNorm1d(5), nn.Tanh())
    return SequentialSplit(nn.Sequential(*features, nn.Flatten()), nn.Linear(10, num_classes))


# method → (algorithm, params): every method that opts in (Algorithm.vectorise)
BATCHED = {
    "fedavg": ("fedavg", {}),
    "fedprox": ("fedprox", {"mu": 0.4}),
    "scaffold": ("scaffold", {"global_lr": 0.7}),
    "scaffold_in_loss": ("scaffold", {"correction": "in_loss"}),
    "fednova": ("fednova", {}),
    "fedntd": ("fedntd", {"beta": 0.7, "tau": 2.5}),
    "fedlc": ("fedlc", {"tau": 0.6}),
    "feddecorr": ("feddecorr", {"beta": 0.3}),
    "qffl": ("qffl", {"q": 0.7}),
    "ccvr": ("ccvr", {}),
    "feddata": ("feddata", {"share_fraction": 0.3}),
    "fedzdac": ("fedzdac", {"zsdg": {"per_class": 2, "iterations": 3}, "start_round": 2}),
    "fedzdas": ("fedzdas", {"zsdg": {"per_class": 2, "iterations": 3}, "start_round": 2}),
}


def run(monkeypatch, algorithm, params, vectorise, model=None, **changes):
    """Global state, per-client stored state, method state and history after ROUNDS rounds, one way."""
    with float64():
        kwargs = {"model": model} if model else {}
        ctx = tiny_context(monkeypatch, vectorise=vectorise, weight_decay=0.01, **kwargs, **changes)
        alg = build_algorithm(algorithm, **params)
        history = []
        import fed.rounds as rounds

        real = rounds.run_round

        def recording(c, a):
            row = real(c, a)
            history.append(row)
            return row

        monkeypatch.setattr("wiring.run_round", recording)
        run_rounds(ctx, alg, ROUNDS)
        clients = {k: ctx.clients.load(k, ctx.round, ctx.device) for k in range(ctx.num_clients)}
        return ctx.global_state, clients, alg.state_dict(), history


def assert_equal(a, b, what=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), what
        for k in a:
            assert_equal(a[k], b[k], f"{what}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            assert_equal(x, y, f"{what}[{i}]")
    elif isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=lambda m: f"{what}: {m}")
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-10, abs=1e-10), what
    else:
        assert a == b, what


@pytest.mark.parametrize("method", sorted(BATCHED))
@pytest.mark.parametrize("model", [None, bn_mlp], ids=["mlp", "batchnorm"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_the_batched_round_computes_what_the_loop_computes(monkeypatch, method, model, optimizer):
    algorithm, params = BATCHED[method]
    if algorithm.startswith("fedzda") and model is None:
        pytest.skip("ZSDG inverts BatchNorm statistics: Fed-ZDA runs on the BatchNorm model only")
    assert build_algorithm(algorithm, **params).vectorise, f"{method} is not on the batched path"
    loop = run(monkeypatch, algorithm, params, False, model, optimizer=optimizer)
    batched = run(monkeypatch, algorithm, params, True, model, optimizer=optimizer)
    assert all(row["batched_clients"] == 3 for row in batched[3]) and "batched_clients" not in loop[3][0]
    strip = [
        [{k: v for k, v in r.items() if "seconds" not in k and k != "batched_clients"} for r in h]
        for h in (loop[3], batched[3])
    ]
    assert_equal(loop[:3], batched[:3], method)
    assert_equal(strip[0], strip[1], f"{method} history")


def test_clients_whose_objectives_cannot_be_stacked_train_one_by_one_and_equal_the_loop(monkeypatch):
    """A LocalContext holding a plain value that differs between clients cannot be vmapped: that round's clients
    train one after another inside the batched round (fed.batched._train_alone), with the loop's numbers."""
    import fed.batched as batched
    from fed.algorithms.fedprox import FedProx

    class Tagged(FedProx):
        vectorise = True

        def client_update(self, ctx, client):
            ctx.model.load_state_dict(ctx.global_state)
            return self.train_locally(ctx, client, *ctx.client_data(client), extra={"tag": client})

    alone = []
    real = batched._train_alone
    monkeypatch.setattr(batched, "_train_alone", lambda r, ctx: alone.append(r.local.client) or real(r, ctx))
    monkeypatch.setitem(globals(), "build_algorithm", lambda name, **params: Tagged(**params))  # what run() builds
    loop = run(monkeypatch, "tagged", {"mu": 0.4}, False)
    assert alone == []
    batched_run = run(monkeypatch, "tagged", {"mu": 0.4}, True)
    assert len(alone) == 3 * ROUNDS and all(row["batched_clients"] == 3 for row in batched_run[3])
    assert_equal(loop[:3], batched_run[:3], "tagged")
