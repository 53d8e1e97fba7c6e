"""A round's clients trained as one batched computation (fed.batched) compute what the loop computes: per method on
the batched path, ≥ 2 rounds both ways in float64 on the wiring problem (partial participation, clients of unequal
size so batches of unequal size, momentum > 0, weight decay), also with a BatchNorm model, and the global state, the
clients' stored state and the method's server state equal to 1e-10."""

import pytest
import torch
from test_wiring_dafl import stub_gan_stage
from test_wiring_feddpms import tiny_vae, tiny_vae_extras
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
    "fedavg_matched": ("fedavg_matched", {"share_fraction": 0.3}),
    "fedzdac": ("fedzdac", {"zsdg": {"per_class": 2, "iterations": 3}, "start_round": 2}),
    "fedzdas": ("fedzdas", {"zsdg": {"per_class": 2, "iterations": 3}, "start_round": 2}),
    "moon": ("moon", {"mu": 0.8, "tau": 0.7, "projection_dim": 3}),
    "naivemix": ("naivemix", {"lam": 0.2, "mean_batch": 2}),
    "fedmix": ("fedmix", {"lam": 0.2, "mean_batch": 2}),
    "fedbr": (
        "fedbr",
        {"lam_cls": 0.7, "lam_con": 0.4, "tau": 0.6, "mean_batch": 2, "pseudo_batch": 3, "projection_dim": 3},
    ),
    "fedgen": ("fedgen", {"alpha": 0.7, "beta": 0.4, "generator_steps": 2, "batch": 3, "hidden": 4, "noise_dim": 3}),
    "fedgen_cut": (
        "fedgen",
        {"generator_steps": 2, "batch": 3, "hidden": 4, "noise_dim": 3, "space": "cut", "gen_ratio": True},
    ),
    "fedbr_mixture": ("fedbr", {"mean_batch": 2, "pseudo_batch": 3, "projection_dim": 3, "mixture": True}),
    "naivemix_beta": ("naivemix", {"lam_beta": 2.0, "mean_batch": 2}),
    "dafl": ("dafl", {"gamma": 0.5, "pls_epsilon": 3.0}),
    "flea": ("flea", {"share_fraction": 0.5, "lambda_ce": 0.4}),
    "flea_code": ("flea", {"share_fraction": 0.5, "warmup": "code", "feature_batches": "loader", "kd": "buffer"}),
    "feddpms": ("feddpms", {"preliminary_rounds": 2, "vae_weight": 0.3, "quota": 4, "abundant": 2, "clip_norm": 0.9}),
}


def setup(ctx, algorithm, tmp_path):
    """What a method needs beyond the wiring problem: its stage's output."""
    if algorithm == "dafl":
        stub_gan_stage(tmp_path / "gans.pt", ctx.num_clients, ctx.num_classes, ctx.input_shape[0])
        ctx.stages = {"gans": tmp_path / "gans.pt"}


def run(monkeypatch, algorithm, params, vectorise, model=None, tmp_path=None, **changes):
    """Global state, per-client stored state, method state and history after ROUNDS rounds, one way."""
    with float64():
        alg = build_algorithm(algorithm, **params)
        kwargs = {"model": model} if model else {}
        if algorithm == "feddpms":
            kwargs = {"model": tiny_vae, "extra_modules": tiny_vae_extras}
        elif algorithm in ("moon", "fedbr"):
            kwargs["extra_modules"] = alg.extra_modules
        ctx = tiny_context(monkeypatch, vectorise=vectorise, weight_decay=0.01, **kwargs, **changes)
        setup(ctx, algorithm, tmp_path)
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
def test_the_batched_round_computes_what_the_loop_computes(monkeypatch, tmp_path, method, model, optimizer):
    algorithm, params = BATCHED[method]
    if algorithm.startswith("fedzda") and model is None:
        pytest.skip("ZSDG inverts BatchNorm statistics: Fed-ZDA runs on the BatchNorm model only")
    if algorithm == "feddpms" and model is not None:
        pytest.skip("FedDPMS runs on its VAE classifier (the wiring test's tiny_vae)")
    assert build_algorithm(algorithm, **params).vectorise, f"{method} is not on the batched path"
    alone = []  # clients that fell back to training one by one: none may
    monkeypatch.setattr("fed.batched._train_alone", lambda r, ctx: alone.append(r))
    loop = run(monkeypatch, algorithm, params, False, model, tmp_path, optimizer=optimizer)
    batched = run(monkeypatch, algorithm, params, True, model, tmp_path, optimizer=optimizer)
    assert all(row["batched_clients"] >= 3 for row in batched[3]) and "batched_clients" not in loop[3][0]
    assert not alone, f"{method}: {len(alone)} clients trained one by one"
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


def test_the_run_s_log_says_which_path_trains_its_clients(monkeypatch):
    import io
    from dataclasses import replace

    from wiring import CFG, tiny_data, wiring_mlp

    from fed.engine import Engine
    from fed.models import MODELS

    monkeypatch.setitem(MODELS, "wiring_mlp", wiring_mlp)
    for algorithm, vectorise, expected in (
        ("fedavg", True, "FedAvg: a round's clients train together"),
        ("centralized", True, "Centralized is not on the batched path: its clients train one by one"),
        ("fedavg", "auto", "vectorise: auto: FedAvg's clients train one by one on cpu (batched on a GPU only)"),
    ):
        log = io.StringIO()
        with float64():
            alg = build_algorithm(algorithm)
            Engine(replace(CFG, rounds=1, vectorise=vectorise), alg, *tiny_data(), seed=0, progress=log).run()
        assert expected in log.getvalue(), log.getvalue()


def test_vectorise_auto_batches_on_a_gpu_and_loops_on_a_cpu(monkeypatch):
    """``auto``: batched where one launch serves a round's clients (CUDA), the loop where channels-last convolutions
    are faster one client at a time (a CPU); the history rows say which path trained each round."""
    from fed.config import FLConfig
    from fed.rounds import run_round

    auto = FLConfig(vectorise="auto")
    assert auto.trains_together(torch.device("cuda")) and auto.trains_together("cuda:1")
    assert not auto.trains_together(torch.device("cpu")) and not auto.trains_together("mps")
    assert FLConfig(vectorise=True).trains_together("cpu") and not FLConfig().trains_together("cuda")
    rows = {}
    for vectorise in (True, "auto"):
        with float64():
            ctx, alg = tiny_context(monkeypatch, vectorise=vectorise), build_algorithm("fedprox", mu=0.4)
            alg.setup(ctx)
            rows[vectorise] = [run_round(ctx, alg) for _ in range(2)]
    assert all(row["batched_clients"] == 3 for row in rows[True])  # 3 of the 5 clients a round
    assert not any("batched_clients" in row for row in rows["auto"])
    with pytest.raises(ValueError, match="vectorise='yes' is not true, false or 'auto'"):
        FLConfig.from_preset(FLConfig.defaults() | {"vectorise": "yes"}, "synthetic")


def test_the_clients_tensors_are_stacked_row_major_whatever_the_model_s_memory_format():
    """A channels-last model (every preset's) stacked as it is keeps channels-last in each client's slice under vmap:
    CUDA's BatchNorm then clones channels-last inside vmap, which PyTorch does not support (a Fed-ZDA round on an H200,
    2026-11-27). The stacks are row-major, values unchanged."""
    from types import SimpleNamespace

    from fed.batched import _stack

    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).to(memory_format=torch.channels_last)
    assert not model[0].weight.is_contiguous()
    group = [SimpleNamespace(start={n: t * (k + 1) for n, t in model.state_dict().items()}) for k in range(3)]
    names = ["0.weight", "1.running_mean"]
    stacked = _stack(group, names)
    for n in names:
        assert stacked[n].is_contiguous() and all(stacked[n][k].is_contiguous() for k in range(3))
        assert torch.equal(stacked[n], torch.stack([r.start[n] for r in group]))


def test_the_clients_per_client_state_is_stacked_row_major_too():
    """MOON's previous local models (channels-last, as every preset's model) differ between clients after a round, so
    they are stacked: as the weights, row-major (round 2 of MOON's batched cells failed so on an H200, 2026-11-30)."""
    from types import SimpleNamespace

    from fed.batched import _batched_locals

    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).to(memory_format=torch.channels_last)
    shared = {n: t.clone() for n, t in model.state_dict().items()}
    group = [
        SimpleNamespace(local=SimpleNamespace(global_params=shared, extra={"prev": {"w": model[0].weight * (k + 1)}}))
        for k in range(3)
    ]
    assert not group[0].local.extra["prev"]["w"].is_contiguous()
    _, leaves, dims = _batched_locals(group)
    stacked = [leaf for leaf, dim in zip(leaves, dims) if dim == 0]
    assert len(stacked) == 1 and stacked[0].is_contiguous() and all(s.is_contiguous() for s in stacked[0])
    assert torch.equal(stacked[0], torch.stack([r.local.extra["prev"]["w"] for r in group]))
