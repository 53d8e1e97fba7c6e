"""PSG's one Poisson rate q (issue 42): the masks, the accountant and the ε0 stop rule read the same q, and no run
records ε ≥ ε0. At |D| = 375, B = 16 the rate B/|D| = 16/375 differs from Opacus' loader rate 1/⌈375/16⌉ = 1/24, so a
place that used the other rate changes the steps, the recorded ε or the batches."""

import math
import warnings

import pytest
import torch
from test_dafl import _quiet, tiny_client  # noqa: F401 (_quiet: an autouse fixture)

import fed.dpgan
from fed.dpgan import PSGSettings, epsilon_after, steps_within_budget, train_psg

N, B, EPS0 = 375, 16, 10.0  # ε0 = 10 binds: 11 of 47 scheduled steps at q = 16/375, 12 at q = 1/24
Q, LOADER_Q = B / N, 1 / math.ceil(N / B)
SETTINGS = {"rounds": 2, "batch_size": B, "width": 4, "epsilon": EPS0}  # 2 epochs: ⌈2 · 375/16⌉ = 47 steps


def client(n=N):
    return tiny_client(n)


@pytest.fixture(scope="module")
def result():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return train_psg(*client(), 3, PSGSettings(**SETTINGS), seed=0)


def test_the_inputs_tell_the_two_rates_apart():
    assert Q != LOADER_Q and PSGSettings(**SETTINGS).sampling == "batch"
    assert (
        steps_within_budget(EPS0, Q, 0.5, 1e-5, 47) == 11 and steps_within_budget(EPS0, LOADER_Q, 0.5, 1e-5, 47) == 12
    )


def test_the_stop_rule_takes_the_steps_of_q_b_over_n(result):
    assert result.sample_rate == Q and result.scheduled_steps == 47 and result.stopped_by_budget
    expected = steps_within_budget(EPS0, Q, 0.5, 1e-5, result.scheduled_steps)
    assert result.steps == expected != steps_within_budget(EPS0, LOADER_Q, 0.5, 1e-5, result.scheduled_steps)


def test_the_accountant_records_the_epsilon_of_q_b_over_n_below_epsilon0(result):
    assert result.epsilon == pytest.approx(epsilon_after(result.steps, Q, 0.5, 1e-5), abs=1e-9)
    assert abs(result.epsilon - epsilon_after(result.steps, LOADER_Q, 0.5, 1e-5)) > 0.05
    assert result.epsilon < EPS0 <= epsilon_after(result.steps + 1, Q, 0.5, 1e-5)  # line 20: the next is revoked


@pytest.mark.parametrize(("mode", "passes"), [("ghost", [200, 100]), ("hooks", [100, 100, 100])])
def test_the_poisson_mask_keeps_a_sample_iff_its_uniform_is_below_q(monkeypatch, mode, passes):
    """Plant the masks' uniforms: 100 samples at u between 1/24 and 16/375 (in at rate q = 16/375, out at 1/24), the
    rest at 0.9 (never in). Every discriminator batch must then be exactly those 100 samples: a step's passes are
    the real and the fake images (one pass of 200 in the ghost mode, two of 100 in Opacus') and the generator's."""
    u = torch.full((N,), 0.9)
    u[:100] = (Q + LOADER_Q) / 2
    rand, batches = torch.rand, []
    monkeypatch.setattr(torch, "rand", lambda *a, **k: u.clone() if a == (N,) else rand(*a, **k))

    class Spied(fed.dpgan.Discriminator):
        def forward(self, x, y):
            batches.append(len(y))
            return super().forward(x, y)

    monkeypatch.setattr(fed.dpgan, "Discriminator", Spied)
    result = train_psg(*client(), 3, PSGSettings(**SETTINGS, grad_sample_mode=mode), seed=0)
    assert result.steps == 11 and batches == passes * 11


def test_a_run_that_would_record_epsilon0_or_more_raises(monkeypatch):
    monkeypatch.setattr(fed.dpgan, "steps_within_budget", lambda epsilon0, q, sigma, delta, scheduled: scheduled)
    with pytest.raises(RuntimeError, match="overspent"):
        train_psg(
            *client(64), 3, PSGSettings(**{**SETTINGS, "epsilon": 8.0}), seed=0
        )  # 8 steps at q = 1/4: ε = 21.3 ≥ 8


def test_the_documented_fmnist_client_keeps_696_of_1055_steps_at_epsilon0_50():
    """README and docs/deviations.md: a configured FMNIST client (6,000 images less the 10 % hold-out) at Table 2's
    block; the loader rate 1/⌈5400/256⌉ = 1/22 in the stop rule alone would take 748 steps and spend ε = 52.16."""
    q, expected_batch, per_epoch = fed.dpgan.sample_rate(5400, 256)
    scheduled = math.ceil(50 * per_epoch)
    steps = steps_within_budget(50.0, q, 0.5, 1e-5, scheduled)
    assert (scheduled, steps) == (1055, 696) and epsilon_after(1, q, 0.5, 1e-5) == pytest.approx(6.2656, abs=1e-4)
    assert epsilon_after(steps, q, 0.5, 1e-5) < 50.0 <= epsilon_after(steps + 1, q, 0.5, 1e-5)
    loader_steps = steps_within_budget(50.0, 1 / 22, 0.5, 1e-5, scheduled)
    assert loader_steps == 748 and epsilon_after(loader_steps, q, 0.5, 1e-5) == pytest.approx(52.16, abs=0.01)
