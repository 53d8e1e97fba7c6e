import pytest
import torch

from fed.algorithms import build_algorithm
from fed.algorithms.base import LocalContext, average_states
from fed.algorithms.qffl import qffl_update


def test_average_states_weighted_and_integer_buffers():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([3.0, 6.0]), "n": torch.tensor(6)}
    out = average_states([a, b], [1, 3])
    assert torch.allclose(out["w"], torch.tensor([2.5, 5.0]))  # (1*1 + 3*3)/4, (2 + 18)/4
    assert out["n"].dtype == torch.int64 and out["n"].item() == 5  # (3 + 18)/4 = 5.25 -> 5
    assert torch.allclose(average_states([a, b], [1, 1])["w"], torch.tensor([2.0, 4.0]))


def test_qffl_update_by_hand():
    # lr = 0.5 -> L = 2; global w = [1, 1]; clients w1 = [0, 1], w2 = [1, 3]; losses F1 = 1, F2 = 4; q = 1
    g = {"w": torch.tensor([1.0, 1.0])}
    s1, s2 = {"w": torch.tensor([0.0, 1.0])}, {"w": torch.tensor([1.0, 3.0])}
    # Delta1 = 2*([1,1]-[0,1]) = [2,0]; Delta2 = 2*([1,1]-[1,3]) = [0,-4]
    # h1 = 1*1^0*4 + 2*1 = 6;  h2 = 1*4^0*16 + 2*4 = 24;  sum h = 30
    # w = [1,1] - (1*[2,0] + 4*[0,-4]) / 30 = [1 - 2/30, 1 + 16/30]
    out = qffl_update(g, [s1, s2], [1.0, 4.0], q=1.0, L=2.0, keys={"w"})
    assert torch.allclose(out["w"], torch.tensor([1 - 2 / 30, 1 + 16 / 30]), atol=1e-6)


def test_qffl_q0_is_simple_mean():
    g = {"w": torch.tensor([1.0, -1.0])}
    states = [{"w": torch.tensor([0.0, 2.0])}, {"w": torch.tensor([4.0, 0.0])}, {"w": torch.tensor([2.0, 1.0])}]
    out = qffl_update(g, states, [0.3, 2.0, 7.0], q=0.0, L=50.0, keys={"w"})
    assert torch.allclose(out["w"], torch.tensor([2.0, 1.0]), atol=1e-6)


def test_fedprox_loss_is_ce_plus_proximal_term():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    anchor = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        model.weight.add_(0.5)  # ||w - w_t||^2 = 6 * 0.25 = 1.5
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 0, 1])
    local = LocalContext(0, anchor)
    ce = torch.nn.functional.cross_entropy(model(x), y).item()
    loss = build_algorithm("fedprox", mu=0.2).local_loss(model, x, y, local, None).item()
    assert loss == pytest.approx(ce + 0.5 * 0.2 * 1.5, rel=1e-6)
    assert build_algorithm("fedavg").local_loss(model, x, y, local, None).item() == pytest.approx(ce)


def test_unknown_and_planned_algorithms_are_explained(monkeypatch):
    monkeypatch.setattr("fed.algorithms.PLANNED", {"fedfuture"})
    with pytest.raises(ValueError, match="^unknown algorithm 'fedsgd'; valid choices: \\['ccvr', 'centralized'"):
        build_algorithm("fedsgd")
    with pytest.raises(ValueError, match="'fedfuture' \\(planned, not yet implemented\\)"):
        build_algorithm("fedfuture")
    with pytest.raises(ValueError, match="q must be >= 0"):
        build_algorithm("qffl", q=-1)


def test_hyperparameters_cover_nested_settings_and_skip_state():
    from fed.algorithms.base import hyperparameters

    a, b = build_algorithm("fedzdac", zsdg={"iterations": 5}), build_algorithm("fedzdac", zsdg={"iterations": 6})
    assert hyperparameters(a) != hyperparameters(b)  # the ZSDG budget is part of a run's identity
    assert hyperparameters(a)["zsdg"]["iterations"] == 5
    scaffold = build_algorithm("scaffold")
    scaffold.c = [torch.zeros(3)]  # method state, not a setting: it must not change a run's identity
    assert hyperparameters(scaffold) == {
        "global_lr": 1.0,
        "correction": "after_step",
        "control_init": "zeros",
        "control_average": "uniform",
    }
    fedgen = build_algorithm("fedgen")
    before = hyperparameters(fedgen)
    fedgen._trained = True
    assert hyperparameters(fedgen) == before
    # a dict is a setting only when its keys are strings and its values plain (a run's identity is JSON)
    scaffold.table, scaffold.ids, scaffold.weights = {"a": [1, 2.5]}, {1: "a"}, {"w": torch.zeros(2)}
    assert hyperparameters(scaffold) == {
        "global_lr": 1.0,
        "correction": "after_step",
        "control_init": "zeros",
        "control_average": "uniform",
        "table": {"a": [1, 2.5]},
    }
