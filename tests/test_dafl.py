"""DA-FL (Tang et al. 2023): PSG's privacy accounting (Opacus), PLS's output distribution, and what leaves a client."""

import dataclasses
import io
import json
import math
import shutil
import warnings

import numpy as np
import pytest
import torch
from conftest import REPO
from opacus.accountants import RDPAccountant

from fed.algorithms import build_algorithm
from fed.algorithms.dafl import pls_counts, pls_probabilities, sampled_counts
from fed.config import FLConfig, MethodSpec
from fed.data.datasets import load_dataset, load_labels
from fed.data.partition import make_partition
from fed.dpgan import (
    PSGSettings,
    epsilon_after,
    generate,
    sample_rate,
    steps_within_budget,
    to_gan_space,
    train_psg,
)
from fed.engine import Engine
from fed.gan_stage import longest_first
from fed.models.cgan import Generator
from fed.provenance import kind, machine
from fed.runner import run_cell, run_stage

CFG = FLConfig(
    num_clients=4, fraction=1.0, rounds=2, local_epochs=1, batch_size=16, lr=0.01, momentum=0.5, model="cnn_dafl"
)
TINY_GAN = {"rounds": 2, "batch_size": 16, "width": 4}


def opacus_epsilon(sigma: float, q: float, steps: int, delta: float) -> float:
    """Opacus' RDP accountant, fed the history directly (independent of our training loop)."""
    accountant = RDPAccountant()
    accountant.history = [(sigma, q, steps)]
    return accountant.get_epsilon(delta)


def tiny_client(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 32, 32, generator=g) * 2 - 1, torch.randint(0, 3, (n,), generator=g)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus: secure RNG off, full backward hooks on non-grad inputs
        yield


def test_printed_epsilon_is_opacus_accountant_for_the_same_sigma_q_steps_delta():
    x, y = tiny_client()
    settings = PSGSettings(**TINY_GAN)
    result = train_psg(x, y, 3, settings, seed=0)
    assert result.steps == result.scheduled_steps == 2 * 4  # 2 epochs of ⌈64/16⌉ Poisson batches
    assert result.sample_rate == pytest.approx(1 / 4)
    expected = opacus_epsilon(0.5, 1 / 4, result.steps, 1e-5)
    assert result.epsilon == pytest.approx(expected, abs=1e-6)
    assert epsilon_after(result.steps, 1 / 4, 0.5, 1e-5) == pytest.approx(expected, abs=1e-6)


def test_training_stops_before_the_step_that_would_exceed_epsilon0():
    x, y = tiny_client()
    settings = PSGSettings(**{**TINY_GAN, "rounds": 20, "epsilon": 25.0})  # 80 steps scheduled
    result = train_psg(x, y, 3, settings, seed=0)
    q, steps = result.sample_rate, result.steps
    assert result.stopped_by_budget and 0 < steps < result.scheduled_steps
    assert result.epsilon < 25.0 <= opacus_epsilon(0.5, q, steps + 1, 1e-5)  # line 20: ε_t ≥ ε0 is revoked
    assert result.epsilon == pytest.approx(opacus_epsilon(0.5, q, steps, 1e-5), abs=1e-6)
    assert steps == steps_within_budget(25.0, q, 0.5, 1e-5, 10_000)


def test_epsilon_after_is_opacus_rdp_zero_without_a_step_and_infinite_without_noise():
    assert epsilon_after(0, 1 / 4, 0.5, 1e-5) == epsilon_after(0, 1 / 4, 0.0, 1e-5) == 0.0  # no step spends nothing
    assert epsilon_after(3, 1 / 4, 0.0, 1e-5) == math.inf
    three_steps = epsilon_after(3, 1 / 4, 1.0, 1e-5)  # σ = 1: finite, Opacus' RDP accountant's value
    assert three_steps == pytest.approx(opacus_epsilon(1.0, 1 / 4, 3, 1e-5), abs=1e-9) and three_steps < 10


def test_steps_within_budget_is_the_last_step_under_epsilon0_by_a_plain_scan():
    """The bisection against Algorithm 2's loop: step t + 1 is taken while ε_{t+1} < ε0, at most ``scheduled``."""
    q, sigma, delta, scheduled = 1 / 4, 1.0, 1e-5, 12
    eps = [epsilon_after(t, q, sigma, delta) for t in range(scheduled + 1)]  # 0, 3.08, 3.87, 4.42, … 7.33
    # ε0 = ε_5 exactly: step 5 is revoked (ε_t ≥ ε0)
    for epsilon0, expected in ((1.0, 0), (4.0, 2), (6.0, 7), (eps[5], 4), (1e9, 12), (math.inf, 12)):
        t = 0
        while t < scheduled and eps[t + 1] < epsilon0:
            t += 1
        assert t == expected and steps_within_budget(epsilon0, q, sigma, delta, scheduled) == t, epsilon0


ONE_STEP = {  # ε of one σ = 0.5 step at δ = 1e-5 (opacus 1.6.0, dp-accounting 0.6.0)
    256 / 5400: {"rdp": 6.265553922598172, "prv": 5.445566998499927, "gdp": 1.3290344838853274, "pld": 5.4350},
    256 / 6000: {"rdp": 6.118415464723645, "prv": 5.283350026167895, "gdp": 1.183243937336833, "pld": 5.2727},
    1 / 24: {"rdp": 6.085733055817429, "prv": 5.246795625772069, "gdp": 1.1527415969253882, "pld": 5.2362},
}
GDP_STEPS_UNDER_5 = {256 / 5400: 10, 256 / 6000: 12, 1 / 24: 13}  # 256/5400: the FMNIST client the docs quote


@pytest.mark.parametrize("q", sorted(ONE_STEP))
def test_one_sigma_half_step_costs_more_than_5_under_every_valid_accountant(q):
    """Table 4's ε0 = 1 and 5 at σ = 0.5: no step fits under Opacus' RDP and PRV accountants nor under the tight
    PLD ε (dp-accounting); only Opacus' GDP accountant (a CLT approximation, "can underestimate") prices one step
    at ε ≈ 1.2-1.3, and would let ε0 = 5 take 10-13 steps."""
    from dp_accounting import dp_event, pld
    from opacus.accountants import GaussianAccountant, PRVAccountant

    def opacus(accountant, steps=1):
        a = accountant()
        a.history = [(0.5, q, steps)]
        return a.get_epsilon(1e-5)

    pld_accountant = pld.PLDAccountant(value_discretization_interval=1e-4)
    pld_accountant.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(0.5)))
    expected = ONE_STEP[q]
    assert opacus(RDPAccountant) == pytest.approx(expected["rdp"], abs=1e-9)
    assert opacus(PRVAccountant) == pytest.approx(expected["prv"], abs=1e-3)
    assert opacus(GaussianAccountant) == pytest.approx(expected["gdp"], abs=1e-9)
    assert pld_accountant.get_epsilon(1e-5) == pytest.approx(expected["pld"], abs=1e-3)
    assert min(expected["rdp"], expected["prv"], expected["pld"]) > 5 and 1 < expected["gdp"] < 5
    assert steps_within_budget(5.0, q, 0.5, 1e-5, 1000) == steps_within_budget(1.0, q, 0.5, 1e-5, 1000) == 0
    steps = GDP_STEPS_UNDER_5[q]
    assert opacus(GaussianAccountant, steps) < 5 <= opacus(GaussianAccountant, steps + 1)


def test_sampling_rate_is_b_over_n_or_opacus_loader_convention():
    assert sample_rate(6000, 256) == (256 / 6000, 256, 6000 / 256)  # Algorithm 2's A(δ0, B, t, σ, |D|)
    assert sample_rate(6000, 256, "loader") == (1 / 24, 250, 24)  # make_private: 1/len(loader), ⌊6000/24⌋
    assert sample_rate(300, 256)[:2] == (256 / 300, 256) and sample_rate(300, 256, "loader")[:2] == (1 / 2, 150)
    assert sample_rate(100, 256) == (1.0, 100, 1.0)  # B > |D|: every sample every step
    x, y = tiny_client(70)
    for sampling, q, scheduled in (("batch", 16 / 70, 9), ("loader", 1 / 5, 10)):  # 2 epochs: ⌈2 · 70/16⌉, 2 · ⌈70/16⌉
        result = train_psg(x, y, 3, PSGSettings(**TINY_GAN, sampling=sampling), seed=0)
        assert result.sample_rate == q and result.scheduled_steps == scheduled
        assert result.epsilon == pytest.approx(opacus_epsilon(0.5, q, result.steps, 1e-5), abs=1e-9)


@pytest.mark.parametrize("mode", ["functorch", "ghost"])
def test_every_per_sample_gradient_mode_trains_the_gan_the_hooks_mode_trains(monkeypatch, mode):
    """The clipping modes (PSGSettings.grad_sample_mode) compute the same clipped, noised gradient: in float64 (where
    only rounding could differ) the same Poisson batches and noise draws give the same generator to 1e-10 after every
    DP-SGD step of two epochs, with the same steps and ε; only the mode under test goes through its own code (torch.
    func, or fed.ghost_clipping)."""
    from opacus.grad_sample import grad_sample_module as gsm

    from fed import dpgan

    calls, running = {"hooks": 0, mode: 0}, ["hooks"]
    for owner, name in ((gsm, "ft_compute_per_sample_gradient"), (dpgan, "clip_per_sample")):
        real = getattr(owner, name)

        def counted(*args, real=real):
            calls[running[0]] += 1
            return real(*args)

        monkeypatch.setattr(owner, name, counted)
    x, y = tiny_client()
    before, runs = torch.get_default_dtype(), {}
    torch.set_default_dtype(torch.float64)
    try:
        for running[0] in ("hooks", mode):
            settings = PSGSettings(**TINY_GAN, grad_sample_mode=running[0])
            runs[running[0]] = train_psg(x.double(), y, 3, settings, seed=0)
    finally:
        torch.set_default_dtype(before)
    hooks, other = runs["hooks"], runs[mode]
    assert calls["hooks"] == 0 < calls[mode]
    assert (hooks.steps, hooks.epsilon) == (other.steps, other.epsilon) and hooks.steps == 8
    for k, v in hooks.generator.items():
        torch.testing.assert_close(other.generator[k], v, rtol=1e-10, atol=1e-10, msg=k)


def test_psg_settings_validate_their_options_and_parse_epsilon():
    for bad, match in (
        ({"sampling": "poisson"}, "PSG sampling must be 'batch' or 'loader', got 'poisson'"),
        ({"schedule": "steps"}, "PSG schedule must be 'epochs' or 'iterations', got 'steps'"),
        ({"grad_sample_mode": "ew"}, r"grad_sample_mode must be one of \('hooks', 'functorch', 'ghost'\), got 'ew'"),
        ({"generator_loss": "wgan"}, "PSG generator_loss must be 'saturating' or 'non_saturating', got 'wgan'"),
        ({"epsilon": 0.0}, r"PSG needs epsilon > 0 and 0 < delta < 1, got \(0.0, 1e-05\)"),
        ({"delta": 0.0}, r"PSG needs epsilon > 0 and 0 < delta < 1, got \(50.0, 0.0\)"),
        ({"delta": 1.0}, r"PSG needs epsilon > 0 and 0 < delta < 1, got \(50.0, 1.0\)"),
        ({"delta": 1.5}, r"PSG needs epsilon > 0 and 0 < delta < 1"),
    ):
        with pytest.raises(ValueError, match=match):
            PSGSettings(**bad)
    with pytest.raises(TypeError, match=r"unknown PSG \(GAN\) options \['sigma'\]; valid: \['batch_size', 'beta1', "):
        PSGSettings.from_params({"sigma": 1.0})
    assert PSGSettings.from_params({"epsilon": "inf"}).epsilon == math.inf  # YAML's "inf"
    assert type(PSGSettings.from_params({"epsilon": 50}).epsilon) is float
    assert PSGSettings.from_params(None) == PSGSettings()


def test_gan_space_is_the_data_range_mapped_to_minus_one_one_at_32():
    mean, std = [0.5, 0.25], [0.2, 0.4]
    x = torch.empty(1, 2, 32, 32)
    x[0, 0], x[0, 1] = 1.0, -0.5  # raw = x std + mean: 0.7 and 0.05 → 2 raw − 1 = 0.4 and −0.9
    x[0, 0, 0, 0], x[0, 0, 0, 1] = 5.0, -5.0  # raw 1.5 and −0.5: outside [0, 1], clamped to ±1
    g = to_gan_space(x, mean, std)
    expected = torch.empty(1, 2, 32, 32)
    expected[0, 0], expected[0, 1] = 0.4, -0.9
    expected[0, 0, 0, 0], expected[0, 0, 0, 1] = 1.0, -1.0
    assert torch.allclose(g, expected, atol=1e-6)
    # 2×2 → 32×32, bilinear with half-pixel centres (align_corners=False): column j samples the source at
    # (j + ½)·2/32 − ½, clamped to [0, 1]; columns 0.2, 0.6 (mean 0, std 1)
    small = torch.tensor([[0.2, 0.6], [0.2, 0.6]]).view(1, 1, 2, 2)
    src = np.clip((np.arange(32) + 0.5) / 16 - 0.5, 0, 1)
    row = torch.tensor(2 * (0.2 + 0.4 * src) - 1, dtype=torch.float32)
    assert torch.allclose(to_gan_space(small, [0.0], [1.0]), row.expand(1, 1, 32, 32), atol=1e-6)


def test_no_step_spends_no_budget_even_without_noise():
    x, y = tiny_client(16)
    result = train_psg(x, y, 3, PSGSettings(**{**TINY_GAN, "rounds": 0, "epsilon": math.inf}), seed=0)
    assert result.steps == result.scheduled_steps == 0 and result.epsilon == 0.0


def test_no_step_fits_a_budget_below_one_steps_cost_and_infinite_budget_adds_no_noise():
    x, y = tiny_client()
    none = train_psg(x, y, 3, PSGSettings(**{**TINY_GAN, "epsilon": 1.0}), seed=0)
    assert none.steps == 0 and none.epsilon == 0.0 and none.stopped_by_budget
    free = train_psg(x, y, 3, PSGSettings(**{**TINY_GAN, "epsilon": math.inf}), seed=0)
    assert free.steps == free.scheduled_steps and free.epsilon == math.inf


def test_a_stage_trains_its_clients_with_the_most_steps_left_first():
    # ε0 = ∞, 3 epochs of q = 8/n: ⌈3n/8⌉ steps. n = 16, 40, 8, 40, 16: 6, 15, 3, 15, 6 steps; client 3 kept step 10
    settings = PSGSettings(rounds=3, batch_size=8, epsilon=math.inf)
    assert [settings.steps(n)[3] for n in (16, 40, 8)] == [6, 15, 3]
    left = longest_first([0, 1, 2, 3, 4], [16, 40, 8, 40, 16], settings, {3: {"step": 10}, 2: {"budget": 3}})
    assert left == [1, 0, 4, 3, 2]  # 15, 6, 6 (a tie in the clients' order), 5, 3
    assert longest_first([2, 0], [16, 40, 8], settings, {}) == [0, 2]  # only the clients asked for


def test_pls_probabilities_by_hand():
    # n = 4 samples, n_k = 1, γ = 0.5: n̂ = 2, r ∈ {0, 1, 2}, u = -|r/2 - 1/4| = (-1/4, -1/4, -3/4);
    # ε / (2Δu) = ε n / 2 = 2 for ε = 1: weights e^{-1/2}, e^{-1/2}, e^{-3/2}
    w = np.exp([-0.5, -0.5, -1.5])
    assert pls_probabilities(1, 4, 2, 1.0) == pytest.approx(w / w.sum(), abs=1e-12)
    assert pls_probabilities(1, 4, 2, math.inf).tolist() == [1.0, 0.0, 0.0]  # no noise: the best r (first of a tie)
    assert pls_probabilities(3, 4, 2, 1e-9) == pytest.approx([1 / 3] * 3)  # no budget: uniform
    # u = (-3/4, -1/4, -1/4): the maximiser is r = 1 (the first of the tie), not r = 0
    assert pls_probabilities(3, 4, 2, math.inf).tolist() == [0.0, 1.0, 0.0]
    # n̂ = 1 (γn < 2): r/n̂ ∈ {0, 1}, u = -|r - 1/4| = (-1/4, -3/4); ε n / 2 = 2: weights e^{-1/2}, e^{-3/2}
    w = np.exp([-0.5, -1.5])
    assert pls_probabilities(1, 4, 1, 1.0) == pytest.approx(w / w.sum(), abs=1e-12)
    # a large ε: logits 4000 u = (-1000, -1000, -3000), far below exp's range; the distribution is still the
    # uniform one over the maximisers (normalised at the largest logit)
    assert pls_probabilities(1, 4, 2, 2000.0) == pytest.approx([0.5, 0.5, 0.0], abs=1e-12)


def test_constructor_validates_gamma_label_selection_and_epsilon1():
    assert build_algorithm("dafl").gamma == 0.01  # the paper's main γ (config/papers/dafl.yaml: dafl_gamma0.01)
    assert build_algorithm("dafl", gamma=1.0).gamma == 1.0  # γ ∈ (0, 1]: every sample's label shared
    for gamma in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"DA-FL: gamma \(the sharing ratio γ\) must be in \(0, 1\]"):
            build_algorithm("dafl", gamma=gamma)
    with pytest.raises(ValueError, match="DA-FL: label_selection must be 'pls' or 'sample', got 'PLS'"):
        build_algorithm("dafl", label_selection="PLS")
    for epsilon1 in (0.0, -1.0):
        with pytest.raises(ValueError, match=r"DA-FL: pls_epsilon \(ε1\) must be > 0"):
            build_algorithm("dafl", pls_epsilon=epsilon1)
    assert build_algorithm("dafl", label_selection="sample", pls_epsilon=0.0).label_selection == "sample"  # unused


def test_pls_output_distribution_matches_the_closed_form():
    counts, gamma, epsilon = np.array([2, 6]), 0.5, 2.0  # n = 8, n̂ = 4; ε1 = 2 → ε = 1 per class
    rng = np.random.default_rng(0)
    draws = np.array([pls_counts(counts, gamma, epsilon, rng) for _ in range(20_000)])
    for k, n_k in enumerate(counts):
        expected = pls_probabilities(n_k, 8, 4, epsilon / 2)
        observed = np.bincount(draws[:, k], minlength=5) / len(draws)
        assert observed == pytest.approx(expected, abs=0.012)  # 4 standard errors at 20 000 draws


def test_pls_is_epsilon1_dp_on_every_neighbour():
    """Theorem 2 with ε1 split over the L classes: replacing one sample (n_a − 1, n_b + 1; n and n̂ unchanged)
    changes the probability of any output (n̂_1..n̂_L) by at most e^{ε1} (each class by at most e^{ε1/L})."""
    counts, gamma, epsilon1 = np.array([5, 0, 12, 3]), 0.4, 2.0
    n, n_hat, L = counts.sum(), math.floor(gamma * counts.sum()), len(counts)

    def log_p(c):
        return [np.log(pls_probabilities(int(n_k), n, n_hat, epsilon1 / L)) for n_k in c]

    worst = 0.0
    for a in range(L):
        for b in range(L):
            if a != b and counts[a] > 0:
                neighbour = counts.copy()
                neighbour[a] -= 1
                neighbour[b] += 1
                per_class = [np.abs(p - q).max() for p, q in zip(log_p(counts), log_p(neighbour))]
                assert max(per_class) <= epsilon1 / L + 1e-12
                worst = max(worst, sum(per_class))  # the largest log-ratio of a joint output
    assert 0 < worst <= epsilon1 + 1e-12


def test_label_sampling_without_privacy_draws_from_the_label_multiset():
    labels = np.array([1] + [2] * 4)  # the paper's example: U_i = {1, 2, 2, 2, 2}
    counts = sampled_counts(labels, 0.8, 3, np.random.default_rng(0))
    assert counts.sum() == 4 and counts[0] == 0 and counts[1] <= 1 and counts[2] <= 4


@pytest.fixture
def dafl_cell(synthetic_root, tmp_path):
    part = tmp_path / "part.json"
    labels = load_labels("synthetic", synthetic_root)
    part.write_text(json.dumps(make_partition(labels, "label_quantity", 4, seed=0, k=1)))
    spec = MethodSpec("dafl", "dafl", {"gamma": 0.1, "gan": TINY_GAN})
    stage = build_algorithm("dafl", **spec.params).stages()["gans"]
    run_stage(stage, CFG, "synthetic", synthetic_root, part, 0, tmp_path / "gans.pt", tmp_path / "w", progress=None)
    return spec, part, tmp_path / "gans.pt"


def test_the_gan_stage_file_holds_generators_and_accounting_never_data(dafl_cell):
    _, _, gans = dafl_cell
    record = torch.load(gans, weights_only=False)
    generator_keys = set(Generator(10, 1, 10, 4).state_dict())
    assert len(record["clients"]) == 4 and record["num_classes"] == 10 and record["channels"] == 1
    for client in record["clients"]:
        assert set(client["generator"]) == generator_keys
        assert client["epsilon"] == pytest.approx(opacus_epsilon(0.5, client["sample_rate"], client["steps"], 1e-5))
        assert not any(isinstance(v, torch.Tensor) for k, v in client.items() if k != "generator")
        assert kind(client) == kind({"machine": machine("cpu")})  # where it ran, which paces stages (fed campaign)


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
def test_the_dp_noise_drawn_on_the_host_is_opacus_own_draw_on_the_cpu(monkeypatch, mode):
    """train_psg draws DP-SGD's noise on the CPU on every device (so a GPU stage is the CPU's draw); on the CPU that
    is Opacus' own DPOptimizer (the one that reads a clipped sum, in the ghost mode), generator for generator."""
    from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping

    from fed import dpgan

    torch.manual_seed(1)
    x, y = torch.rand(40, 1, 32, 32) * 2 - 1, torch.randint(3, (40,))
    settings = PSGSettings(**{**TINY_GAN, "noise_multiplier": 1.3, "grad_sample_mode": mode})
    ours = train_psg(x, y, 3, settings, seed=4)
    opacus = {True: DPOptimizerFastGradientClipping, False: DPOptimizer}
    monkeypatch.setattr(dpgan, "_host_noise_optimizer", opacus.get)
    theirs = train_psg(x, y, 3, settings, seed=4)
    assert ours.steps == theirs.steps > 1
    for name, tensor in ours.generator.items():
        assert torch.equal(tensor, theirs.generator[name]), name


def test_the_gan_stage_trains_clients_at_once_in_processes_of_their_own_as_it_trains_them_in_turn(
    dafl_cell, synthetic_root, tmp_path
):
    """``threads`` clients at a time (``fed.gan_stage.train_clients``: ``python -m fed.gan_stage`` per client) give the
    in-process stage's file, generator for generator; a stage killed after some clients trains only the rest, and
    again a client that other PSG code trained (its record's ``code``)."""
    spec, part, gans = dafl_cell
    stage = build_algorithm("dafl", **spec.params).stages()["gans"]
    work, log = tmp_path / "w2", io.StringIO()
    work.mkdir()
    shutil.copyfile(tmp_path / "w" / "client1.pt", work / "client1.pt")  # one client finished before a kill
    stale = torch.load(tmp_path / "w" / "client0.pt", weights_only=False)
    torch.save(stale | {"code": "another psg code"}, work / "client0.pt")  # one finished under other code
    run_stage(stage, CFG, "synthetic", synthetic_root, part, 0, tmp_path / "g2.pt", work, threads=2, progress=log)
    assert "3 of 4 clients to train" in log.getvalue() and "2 at a time" in log.getvalue()
    assert sorted(p.name for p in work.glob("client*.log")) == ["client0.log", "client2.log", "client3.log"]
    assert not list(work.glob("*.request.pt")) and not list(work.glob("*.tmp"))
    one, two = torch.load(gans, weights_only=False), torch.load(tmp_path / "g2.pt", weights_only=False)
    for a, b in zip(one["clients"], two["clients"], strict=True):
        apart = ("generator", "seconds", "machine")  # generators compared below; a client process has one thread
        assert {k: v for k, v in a.items() if k not in apart} == {k: v for k, v in b.items() if k not in apart}
        assert kind(b) == kind(a)  # a client process names its machine too
        for name, tensor in a["generator"].items():
            assert torch.equal(tensor, b["generator"][name]), name


def test_a_failing_client_process_names_its_client_and_shows_its_log(tmp_path):
    from fed.gan_stage import train_clients

    bad = lambda k: {"x": torch.zeros(2, 1, 32, 32), "y": torch.zeros(2, dtype=torch.long), "num_classes": 1,  # noqa: E731
                     "settings": {"no_such_option": 1}, "seed": k}  # fmt: skip
    with pytest.raises(RuntimeError, match=r"(?s)PSG of client \d failed .*no_such_option"):
        train_clients([0, 1], bad, tmp_path, workers=2)


def test_a_psg_client_stopped_after_every_step_takes_the_steps_of_an_uninterrupted_one(tmp_path):
    """A client's state kept at ``stop_at`` and resumed (``train_psg``'s ``state_path``): both networks, both Adam
    states, the accountant and all four random streams come back, so a client stopped after each of its steps ends
    with the generator, steps and ε of one that never stopped; a state of another seed is not resumed."""
    from fed.checkpoint import OutOfTime

    x, y = tiny_client()
    settings = PSGSettings(**TINY_GAN)
    whole = train_psg(x, y, 3, settings, seed=0)
    state, stops = tmp_path / "client0.state.pt", 0
    while True:
        try:
            parts = train_psg(x, y, 3, settings, seed=0, state_path=state, stop_at=0.0)
            break
        except OutOfTime:
            stops += 1
            assert torch.load(state, weights_only=False)["step"] == stops  # one step a call
    assert stops == whole.steps - 1 and not state.exists()
    assert (parts.steps, parts.epsilon) == (whole.steps, whole.epsilon)
    for name, tensor in whole.generator.items():
        assert torch.equal(tensor, parts.generator[name]), name
    with pytest.raises(OutOfTime):
        train_psg(x, y, 3, settings, seed=0, state_path=state, stop_at=0.0)
    other = train_psg(x, y, 3, settings, seed=1, state_path=state)  # seed 0's state lies there
    for name, tensor in train_psg(x, y, 3, settings, seed=1).generator.items():
        assert torch.equal(tensor, other.generator[name]), name


def test_a_stage_s_progress_reads_its_finished_clients_and_the_kept_step_of_a_stopped_one(tmp_path):
    """``stage_progress`` (what ``fed campaign --status`` shows of a GAN stage), from the files the stage writes:
    client 0 finished (its record), client 1 stopped after its first step (its kept state, with its budget), a
    request, a previous state, the files of other PSG code and a finished client of other settings that are
    neither."""
    from fed.checkpoint import OutOfTime
    from fed.dpgan import client_record
    from fed.gan_stage import _save, stage_progress

    x, y = tiny_client()
    settings = dataclasses.asdict(PSGSettings(**TINY_GAN))
    request = {"x": x, "y": y, "num_classes": 3, "settings": settings, "seed": 0}
    _save(client_record(request), tmp_path / "client0.pt")
    with pytest.raises(OutOfTime):
        client_record(request | {"seed": 1, "state": str(tmp_path / "client1.state.pt"), "stop_at": 0.0})
    torch.save(request, tmp_path / "client2.request.pt")
    (tmp_path / "client1.state.prev.pt").write_bytes(b"")
    whole = torch.load(tmp_path / "client0.pt", weights_only=False)
    other = {"code": "another psg code"}  # written by other PSG code: trained again, so no progress
    torch.save(whole | other, tmp_path / "client3.pt")
    torch.save(torch.load(tmp_path / "client1.state.pt", weights_only=False) | other, tmp_path / "client4.state.pt")
    torch.save(whole | {"settings": settings | {"lr": 1.0}}, tmp_path / "client5.pt")  # another stage's settings
    found = stage_progress(tmp_path, PSGSettings(**TINY_GAN))
    assert found["finished"] == {0: {k: whole[k] for k in ("steps", "scheduled_steps", "epsilon", "seconds")}}
    assert found["kept"].keys() == {1} and found["kept"][1]["step"] == 1
    assert found["kept"][1]["budget"] == whole["steps"] > 1  # the same data and settings: the same budget
    # what --status reads of a client not started: the steps the client takes
    assert PSGSettings(**TINY_GAN).steps(len(y))[2:] == (whole["scheduled_steps"], whole["steps"])
    assert 0 < found["kept"][1]["seconds"]


def test_a_gan_stage_past_its_deadline_starts_no_client_and_a_client_process_stops_with_its_state(tmp_path):
    import dataclasses
    import os
    import subprocess
    import sys

    from fed.checkpoint import OutOfTime
    from fed.gan_stage import OUT_OF_TIME, train_clients

    x, y = tiny_client()
    settings = dataclasses.asdict(PSGSettings(**TINY_GAN))
    late = lambda k: {"x": x, "y": y, "num_classes": 3, "settings": settings, "seed": k, "stop_at": 0.0}  # noqa: E731
    for workers in (1, 2):
        with pytest.raises(OutOfTime, match="not started"):
            train_clients([0, 1], late, tmp_path, workers=workers)
    assert not list(tmp_path.iterdir())
    torch.save(late(0) | {"state": str(tmp_path / "s.pt")}, tmp_path / "r.pt")  # as train_clients hands it over
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    cmd = [sys.executable, "-m", "fed.gan_stage", str(tmp_path / "r.pt"), str(tmp_path / "c.pt")]
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == OUT_OF_TIME
    assert torch.load(tmp_path / "s.pt", weights_only=False)["step"] == 1 and not (tmp_path / "c.pt").exists()


def dafl_engine(spec, part, gans, root):
    """An engine of the fixture's DA-FL cell, its GAN stage given."""
    return Engine(
        CFG,
        build_algorithm("dafl", **spec.params),
        load_dataset("synthetic", root, "train"),
        load_dataset("synthetic", root, "test"),
        json.loads(part.read_text()),
        0,
        stages={"gans": gans},
        progress=None,
    )


def test_raw_client_data_never_leaves_the_client(dafl_cell, synthetic_root):
    spec, part, gans = dafl_cell
    engine = dafl_engine(spec, part, gans, synthetic_root)
    ctx, dafl = engine.ctx, engine.algorithm
    dafl.setup(ctx)
    reads = []
    samples = ctx.samples
    ctx.samples = lambda idx: reads.append(set(idx.tolist())) or samples(idx)  # every read of real samples
    for i in range(ctx.num_clients):
        reads.clear()
        x, y = dafl.training_data(ctx, i)
        assert reads and all(r <= set(ctx.train_idx[i].tolist()) for r in reads)  # its own samples, nothing else
        own = len(ctx.train_idx[i])
        pool = [s for j, s in enumerate(dafl._synthetic) if j != i]
        assert torch.equal(x[own:], torch.cat([s[0] for s in pool]))
        assert torch.equal(y[own:], torch.cat([s[1] for s in pool]))
        others = torch.cat([samples(ctx.train_idx[j])[0] for j in range(ctx.num_clients) if j != i]).flatten(1)
        assert torch.cdist(x[own:].flatten(1), others).min() > 1e-3  # no shared row is another client's sample


def test_dafl_cell_records_its_privacy_ledger(dafl_cell, synthetic_root, tmp_path):
    spec, part, gans = dafl_cell
    out = run_cell(CFG, spec, "synthetic", synthetic_root, part, 0, tmp_path / "cell", stages={"gans": gans})
    ledger = out["shared"]
    eps = [c["epsilon"] for c in torch.load(gans, weights_only=False)["clients"]]
    assert ledger["epsilon_gan"] == pytest.approx(max(eps)) and ledger["epsilon_labels"] == 1.0
    assert ledger["epsilon_total"] == pytest.approx(max(eps) + 1.0) and ledger["delta"] == 1e-5
    assert ledger["synthetic_samples"] > 0
    assert "raw_samples" not in ledger and not out["diverged"]


def test_a_client_with_no_label_to_share_generates_nothing():
    """⌊γ|D_i|⌋ = 0 (a 50-sample client at γ = 0.01) gives empty private counts: no sample, in GAN space's shape,
    where G(z, ŷ) on an empty batch raised an IndexError (the head-to-head's 100-client regimes); a non-empty label
    set still generates one image per label."""
    x, y = tiny_client(40)
    settings = PSGSettings(**TINY_GAN)
    generator = train_psg(x, y, 3, settings, seed=0).generator
    empty = generate(generator, torch.zeros(0, dtype=torch.long), 3, 1, settings, seed=1)
    assert empty.shape == (0, 1, 32, 32)
    assert pls_counts(np.bincount([0] * 50, minlength=3), 0.01, 1.0, np.random.default_rng(0)).sum() == 0
    assert generate(generator, torch.tensor([0, 2]), 3, 1, settings, seed=1).shape == (2, 1, 32, 32)


def test_the_leakage_audit_tests_each_client_s_synthetic_samples_against_its_own_records(dafl_cell, synthetic_root):
    from fed.leakage import audit, closer_to_train

    spec, part, gans = dafl_cell
    engine = dafl_engine(spec, part, gans, synthetic_root)
    out = audit(engine, engine.global_state, {"per_class": 1, "iterations": 2})["artifacts"]["synthetic_samples"]
    ctx, dafl = engine.ctx, engine.algorithm
    x = ctx.train_set.x
    hits = torch.cat(
        [closer_to_train(s, x[ctx.train_idx[k]], x[ctx.test_idx[k]]) for k, (s, _) in enumerate(dafl._synthetic)]
    )
    assert out["n"] == out["audited"] == len(hits) == sum(len(y) for _, y in dafl._synthetic) > 0
    assert out["closer_to_train"] == pytest.approx(float(hits.mean()))


def test_label_fidelity_is_the_share_the_judge_gives_the_label_by_hand():
    """A judge whose logits are (x, −x): class 0 where the sample's one pixel is positive."""
    from fed.reporting.gan_fidelity import label_fidelity

    judge = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(1, 2, bias=False))
    judge[1].weight.data = torch.tensor([[1.0], [-1.0]])
    samples = torch.tensor([1.0, 2.0, -1.0, 3.0, -0.5]).view(5, 1, 1, 1)
    assert label_fidelity(judge, samples, 0) == (pytest.approx(3 / 5), 0, pytest.approx(3 / 5))
    assert label_fidelity(judge, samples, 1) == (pytest.approx(2 / 5), 0, pytest.approx(3 / 5))
    share, modal, _ = label_fidelity(judge, samples[:0], 0)
    assert math.isnan(share) and modal == -1


def test_a_pilot_trains_a_client_as_its_stage_does_and_the_fidelity_script_reads_both(
    dafl_cell, synthetic_root, tmp_path
):
    """scripts/psg_pilot.py with no change gives the stage's own client, generator for generator; with a change, the
    settings it names; scripts/gan_fidelity.py reads a stage file and a pilot's directory, a row per client."""
    import subprocess
    import sys

    spec, part, gans = dafl_cell
    stage = build_algorithm("dafl", **spec.params).stages()["gans"]
    preset = dataclasses.asdict(CFG)
    args = {"stage": {"kind": "dp_cgan", "params": dict(stage.params)}, "preset": preset, "dataset": "synthetic",
            "data_root": str(synthetic_root), "partition_file": str(part), "seed": 0, "out": str(gans)}  # fmt: skip
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"jobs": [{"kind": "stage", "args": args}]}))
    pilot = [sys.executable, str(REPO / "scripts/psg_pilot.py"), str(plan), "--partition", str(part), "--client", "2"]
    subprocess.run([*pilot, "-o", str(tmp_path / "same")], check=True, capture_output=True)
    ours = torch.load(tmp_path / "same" / "client2.pt", weights_only=False)
    theirs = torch.load(tmp_path / "w" / "client2.pt", weights_only=False)
    assert ours["steps"] == theirs["steps"] > 0 and ours["settings"] == theirs["settings"]
    for name, tensor in theirs["generator"].items():
        assert torch.equal(ours["generator"][name], tensor), name
    changed = [*pilot, "--set", "generator_loss=non_saturating", "-o", str(tmp_path / "ns")]
    subprocess.run(changed, check=True, capture_output=True)
    assert sorted(p.name for p in (tmp_path / "ns").glob("client*.pt")) == ["client2.pt"]
    record = torch.load(tmp_path / "ns" / "client2.pt", weights_only=False)
    assert record["settings"] == {**theirs["settings"], "generator_loss": "non_saturating"}

    script = [sys.executable, str(REPO / "scripts/gan_fidelity.py"), str(gans), str(tmp_path / "ns"), "--partition",
              str(part), "--dataset", "synthetic", "--data-root", str(synthetic_root), "--judge-epochs", "1",
              "--per-class", "20"]  # fmt: skip
    text = subprocess.run(script, capture_output=True, text=True, check=True).stdout
    assert text.startswith("judge: cnn_dafl, 1 epochs on ") and "test accuracy" in text
    assert f"{gans}: 4 of 4 clients trained" in text and f"{tmp_path / 'ns'}: 1 of 4 clients trained" in text
    assert text.count("saturating loss): ") == 5 and text.count("non_saturating loss): ") == 1
