"""Each baseline's update rule on a tiny case whose expected value is computed by hand (numbers in comments)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call

from fed.algorithms import build_algorithm
from fed.algorithms.base import LocalContext
from fed.algorithms.ccvr import class_statistics, combine_statistics
from fed.algorithms.fedbr import FedBR, adversarial_step
from fed.algorithms.feddecorr import decorrelation_loss
from fed.algorithms.fedgen import diversity_loss, label_weights
from fed.algorithms.fedlc import calibrated_logits
from fed.algorithms.fedmix import fedmix_loss, naivemix_loss
from fed.algorithms.fednova import fednova_update, normaliser
from fed.algorithms.fedntd import not_true, not_true_distillation
from fed.algorithms.scaffold import control_variate_update
from fed.losses import contrastive_loss, soft_cross_entropy
from fed.models.base import SequentialSplit
from fed.sharing import mean_batches, share_subset

T = torch.tensor


def test_scaffold_option_ii_control_variate():
    # c_i = [1, 0], c = [0.5, 0.5], x = [2, 2], y = [1, 3], K = 4, lr = 0.25  ->  K*lr = 1
    # c_i+ = c_i - c + (x - y) / 1 = [1 - 0.5 + 1, 0 - 0.5 - 1] = [1.5, -1.5]
    out = control_variate_update([T([1.0, 0.0])], [T([0.5, 0.5])], [T([2.0, 2.0])], [T([1.0, 3.0])], 4, 0.25)
    assert torch.allclose(out[0], T([1.5, -1.5]))


def test_scaffold_correction_is_the_gradient_of_the_linear_term():
    from fed.algorithms import build_algorithm
    from fed.algorithms.base import LocalContext

    model = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    corr = [T([[1.0, -2.0], [0.5, 0.0]])]
    x, y = T([[0.0, 0.0]]), T([0])  # zero input: the CE gradient w.r.t. the weight is 0
    build_algorithm("scaffold", correction="in_loss").local_loss(
        model, x, y, LocalContext(0, [], {"correction": corr}), None
    ).backward()
    assert torch.allclose(model.weight.grad, corr[0])  # g - c_i + c with g = 0


def test_fednova_normalised_averaging_by_hand():
    # plain SGD: a_i = tau_i.  x = [0], y_1 = [-2] after 2 steps, y_2 = [-8] after 4 steps, n = 1 and 3
    # p = [1/4, 3/4]; d_1 = (0 + 2)/2 = 1, d_2 = (0 + 8)/4 = 2; tau_eff = 1/4*2 + 3/4*4 = 3.5
    # x+ = 0 - 3.5 * (1/4*1 + 3/4*2) = -3.5 * 1.75 = -6.125   (FedAvg would give -6.5)
    g = {"w": T([0.0])}
    out = fednova_update(g, [{"w": T([-2.0])}, {"w": T([-8.0])}], [2, 4], [1, 3], 0.0, {"w"})
    assert out["w"].item() == pytest.approx(-6.125)
    # momentum 0.5, 2 steps: a = (2 - 0.5 * (1 - 0.25) / 0.5) / 0.5 = (2 - 0.75) / 0.5 = 2.5
    assert normaliser(2, 0.5) == pytest.approx(2.5) and normaliser(3, 0.0) == 3
    # equal steps -> FedAvg's weighted mean
    same = fednova_update(g, [{"w": T([-2.0])}, {"w": T([-8.0])}], [3, 3], [1, 3], 0.0, {"w"})
    assert same["w"].item() == pytest.approx(-6.5)


def test_moon_contrastive_loss_by_hand():
    # sim(z, z_glob) = 1, sim(z, z_prev) = 0, tau = 1: -log(e / (e + 1)) = log(1 + 1/e)
    z, pos, neg = T([[1.0, 0.0]]), T([[2.0, 0.0]]), T([[0.0, 3.0]])
    assert contrastive_loss(z, pos, neg, 1.0).item() == pytest.approx(math.log(1 + math.exp(-1)))
    # tau = 0.5 doubles the logits: log(1 + e^-2)
    assert contrastive_loss(z, pos, neg, 0.5).item() == pytest.approx(math.log(1 + math.exp(-2)))


class _ScaleSecond(nn.Module):
    """P(h) = (h₁, a·h₂): a one-parameter projection whose gradient is easy by hand."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.tensor(1.0))

    def forward(self, h):
        return h * torch.stack([torch.ones(()), self.a])


def test_fedbr_max_step_by_hand():
    # h_p = (1, 1), h_g = (1, 0), h_l = (0, 1); P(h_p) = (1, a): sim to global 1/√(1+a²), to local a/√(1+a²).
    # ℓ = log(1 + e^{(s⁻ − s⁺)/τ}); at a = 1 the exponent is 0, so dℓ/da = ½ · (1/τ) · d[(a−1)/√(1+a²)]/da = ½·2·(1/√2)
    p = _ScaleSecond()
    adversarial_step(p, T([[1.0, 1.0]]), T([[1.0, 0.0]]), T([[0.0, 1.0]]), tau=0.5, lr=0.1)
    assert p.a.item() == pytest.approx(1 + 0.1 / math.sqrt(2), rel=1e-6)  # ascent: the local view gains


def test_fedbr_s_max_step_by_torch_func_is_autograd_s():
    """adversarial_step takes ∇_P ℓ_con with torch.func (so that clients can batch it): the step equals the
    torch.autograd formulation that produced the committed FedBR cells, to float64 rounding."""
    torch.manual_seed(0)
    ours = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4)).double()
    theirs = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4)).double()
    theirs.load_state_dict(ours.state_dict())
    h_p, h_g, h_l = (torch.randn(5, 3, dtype=torch.float64) for _ in range(3))
    before = ours[2].weight.detach().clone()
    adversarial_step(ours, h_p, h_g, h_l, tau=0.6, lr=0.3)
    assert not torch.equal(ours[2].weight, before)  # the step moved P
    params = dict(theirs.named_parameters())
    loss = contrastive_loss(*(functional_call(theirs, params, (h,)) for h in (h_p, h_g, h_l)), 0.6)
    with torch.no_grad():
        for q, g in zip(params.values(), torch.autograd.grad(loss, list(params.values()))):
            q.add_(g, alpha=0.3)
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14, msg=name)


def test_fedbr_min_step_holds_the_projection_fixed():
    torch.manual_seed(0)
    model = SequentialSplit(nn.Sequential(nn.Linear(4, 3), nn.ReLU()), nn.Linear(3, 2))
    fedbr = FedBR(pseudo_batch=5)
    model.extras = nn.ModuleDict(fedbr.extra_modules(model, (4,)))
    fedbr.x_bar, fedbr.y_bar = torch.randn(6, 4), torch.full((6, 2), 0.5)
    ctx = SimpleNamespace(round_lr=lambda: 0.1, global_model=lambda: model)
    local = LocalContext(0, [], streams={"pool": torch.arange(6), "rng": torch.Generator().manual_seed(0)})
    before = [q.detach().clone() for q in model.extras.parameters()]
    x, y = torch.randn(8, 4), torch.randint(2, (8,))
    local.draws = fedbr.step_draws(model, x, y, local, ctx)  # the step's pseudo-data, drawn before the objective
    assert local.draws["x_p"].shape == (5, 4)
    loss = fedbr.local_loss(model, x, y, local, ctx)
    loss.backward()
    assert all(q.grad is None for q in model.extras.parameters())  # SGD leaves P where the max step put it
    assert any(not torch.equal(q, b) for q, b in zip(model.extras.parameters(), before))  # the max step moved it
    assert all(q.grad is not None for q in model.body.parameters())


def test_fedmix_and_naivemix_by_hand():
    # f(x) = W x with W = [[1], [0]] (1-d input, 2 classes); x = 2, y = 0, x_bar = 1, y_bar = [0, 1], lam = 0.5
    model = nn.Linear(1, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(T([[1.0], [0.0]]))
    x, y, xb, yb = T([[2.0]]), T([0]), T([[1.0]]), T([[0.0, 1.0]])
    # (1 - lam) x = 1: logits [1, 0], p = softmax = [e/(e+1), 1/(e+1)]
    p0 = math.e / (math.e + 1)
    ce_y, ce_bar = -math.log(p0), -math.log(1 - p0)
    # d ce_y / d x' = W^T (p - e_0) = 1*(p0 - 1) + 0 = p0 - 1; Taylor term = (p0 - 1) * x_bar
    expected = 0.5 * ce_y + 0.5 * ce_bar + 0.5 * (p0 - 1) * 1.0
    assert fedmix_loss(model, x, y, xb, yb, 0.5).item() == pytest.approx(expected, rel=1e-6)
    # the public code's Taylor term: × (1 − λ)/B; B = 2 (the sample twice), λ = 0.25: input 1.5, logits [1.5, 0]
    r0 = math.exp(1.5) / (math.exp(1.5) + 1)
    code = 0.75 * -math.log(r0) + 0.25 * -math.log(1 - r0) + 0.25 * (r0 - 1) * 1.0 * 0.75 / 2
    got = fedmix_loss(model, x.repeat(2, 1), T([0, 0]), xb.repeat(2, 1), yb.repeat(2, 1), 0.25, "code")
    assert got.item() == pytest.approx(code, rel=1e-6)
    with pytest.raises(ValueError, match="fedmix: taylor_term must be one of"):
        build_algorithm("fedmix", taylor_term="Code")
    # NaiveMix: input 0.5*2 + 0.5*1 = 1.5 -> logits [1.5, 0]; target [0.5, 0.5]
    q0 = math.exp(1.5) / (math.exp(1.5) + 1)
    half = -0.5 * math.log(q0) - 0.5 * math.log(1 - q0)
    assert naivemix_loss(model, x, y, xb, yb, 0.5, 2).item() == pytest.approx(half, rel=1e-6)
    # one λ per sample (FLea's code: λ ~ Beta(2, 2)); λ = 0 leaves the sample alone: logits [2, 0], target [1, 0]
    plain = -math.log(math.exp(2) / (math.exp(2) + 1))
    lam = T([0.5, 0.0])
    got = naivemix_loss(model, x.repeat(2, 1), T([0, 0]), xb.repeat(2, 1), yb.repeat(2, 1), lam, 2).item()
    assert got == pytest.approx((half + plain) / 2, rel=1e-6)
    with pytest.raises(ValueError, match="lam_beta"):
        build_algorithm("naivemix", lam_beta=0)


def test_fedmix_s_taylor_term_is_autograd_s_input_gradient_and_moves_batchnorm_once():
    """fedmix_loss takes ∂ℓ/∂x with torch.func (so that clients can batch it): its value, its gradient by the
    parameters (through the Taylor term's second derivative) and the BatchNorm statistics after it equal the
    torch.autograd formulation's, with one forward pass."""

    def reference(model, x, y, x_bar, y_bar, lam):
        x_in = ((1 - lam) * x).detach().requires_grad_(True)
        logits = model(x_in)
        ce = torch.nn.functional.cross_entropy(logits, y)
        (g,) = torch.autograd.grad(ce, x_in, create_graph=True)
        return (1 - lam) * ce + lam * soft_cross_entropy(logits, y_bar) + lam * (g * x_bar).sum()

    torch.manual_seed(0)
    make = lambda: nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2)).double()  # noqa: E731
    ours, theirs = make(), make()
    theirs.load_state_dict(ours.state_dict())
    x, y = torch.randn(5, 3, dtype=torch.float64), torch.tensor([0, 1, 1, 0, 1])
    x_bar, y_bar = torch.randn(5, 3, dtype=torch.float64), torch.softmax(torch.randn(5, 2, dtype=torch.float64), 1)
    got, want = fedmix_loss(ours, x, y, x_bar, y_bar, 0.3), reference(theirs, x, y, x_bar, y_bar, 0.3)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(
        torch.autograd.grad(got, list(ours.parameters())), torch.autograd.grad(want, list(theirs.parameters()))
    ):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-15, msg=name)
    assert int(ours[1].num_batches_tracked) == 1


def test_mean_batches_and_raw_share():
    x = torch.arange(6, dtype=torch.float32).view(6, 1)
    y = T([0, 0, 1, 1, 1, 0])
    xm, ym = mean_batches(x, y, 2, 3, torch.Generator().manual_seed(0))
    assert xm.shape == (2, 1) and torch.allclose(xm.sum(), x.sum() / 3)  # two means of three: sum = total/3
    assert torch.allclose(ym.sum(0), T([1.0, 1.0]))  # label mass: (3 zeros + 3 ones) / 3
    idx = share_subset(25, 0.1, torch.Generator().manual_seed(0))
    assert len(idx) == 3 and len(set(idx.tolist())) == 3  # ceil(2.5)


def test_feddecorr_by_hand():
    # the authors' loss.py: unbiased std, C = z^T z, mean of the d(d-1) squared off-diagonals, / N
    # z = [[1, 0], [0, 1], [-1, -1]]: means 0, unbiased variances 1 -> C_01 = 0 + 0 + 1 = 1 -> mean 1, / 3
    z = T([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    assert decorrelation_loss(z).item() == pytest.approx(1 / 3, rel=1e-6)
    # the paper form: population variance 2/3, K = z^T z / (3 * 2/3) = [[1, .5], [.5, 1]] -> 2.5 / d^2 = 0.625
    assert decorrelation_loss(z, "paper").item() == pytest.approx(0.625, rel=1e-6)
    # d = 3, third dim = sum of the others: variances 1, 1, 3 -> C_01 = 1, C_02 = C_12 = 3 / sqrt(3)
    # off-diagonal squares 2 * (1 + 3 + 3) = 14, mean over 6 = 7/3, / N = 3 -> 7/9
    z3 = T([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [-1.0, -1.0, -2.0]])
    assert decorrelation_loss(z3).item() == pytest.approx(7 / 9, rel=1e-6)
    # d = 9 > N = 3 (the Gram route): z3 tiled thrice; C's diagonal 2, so sum C^2 = 9 * (3 * 4 + 14) = 234,
    # minus the 9 diagonal squares 36 = 198 over 72 off-diagonals = 2.75, / N -> 11/12
    assert decorrelation_loss(z3.repeat(1, 3)).item() == pytest.approx(11 / 12, rel=1e-6)
    two = T([[1.0, 1.0], [-1.0, -1.0]])  # perfectly correlated, N = 2: C = [[1, 1], [1, 1]] -> 1 / 2
    assert decorrelation_loss(two).item() == pytest.approx(0.5, rel=1e-6)
    assert decorrelation_loss(T([[1.0, 2.0]])).item() == 0.0  # a batch of one: 0, as the authors return


def test_fedlc_calibration_by_hand():
    # counts [16, 1]: subtract tau * [16^-1/4, 1] = [0.5, 1] (tau = 1)
    out = calibrated_logits(T([[2.0, 2.0]]), T([16.0, 1.0]), 1.0)
    assert torch.allclose(out, T([[1.5, 1.0]]))
    assert calibrated_logits(T([[0.0]]), T([0.0]), 1.0).item() == pytest.approx(-100.0)  # absent: 1e-8^-1/4
    # FLea's code adds 1e-6 to every count: absent -(1e-6)^-1/4 = -31.62..., 16 -> (16 + 1e-6)^-1/4 (τ = 0.5)
    out = calibrated_logits(T([[0.0, 0.0]]), T([0.0, 16.0]), 0.5, "offset").double()
    assert out[0, 0].item() == pytest.approx(-0.5 * 10**1.5, rel=1e-6)
    assert out[0, 1].item() == pytest.approx(-0.5 * (16 + 1e-6) ** -0.25, rel=1e-6)
    with pytest.raises(ValueError, match=r"^FedLC: absent must be one of \['floor', 'offset'\], got 'zero'$"):
        build_algorithm("fedlc", absent="zero")
    assert build_algorithm("fedlc").absent == "floor"  # FL-bench's, the head-to-head's (FLea's reproduction: offset)


def test_fedntd_not_true_distillation_by_hand():
    y = T([0])
    assert torch.equal(not_true(T([[5.0, 1.0, 2.0]]), y), T([[1.0, 2.0]]))
    # local not-true logits [0, 0] -> [1/2, 1/2]; global [ln 2, 0] -> [2/3, 1/3]
    kl = 2 / 3 * math.log((2 / 3) / 0.5) + 1 / 3 * math.log((1 / 3) / 0.5)
    out = not_true_distillation(T([[5.0, 0.0, 0.0]]), T([[0.0, math.log(2), 0.0]]), y, 1.0)
    assert out.item() == pytest.approx(kl, rel=1e-6)


def test_fedgen_label_weights_by_hand():
    w = label_weights(T([[2.0, 0.0, 0.0], [2.0, 6.0, 0.0]]))
    assert torch.allclose(w, T([[0.5, 0.0, 0.0], [0.5, 1.0, 0.0]]))


def test_fedgen_diversity_by_hand():
    # the authors' DiversityLoss: noise [[0], [1]] -> mean squared distances [[0, 1], [1, 0]];
    # outputs [[0, 0], [1, 3]] -> mean absolute distances [[0, 2], [2, 0]]; exp(-mean([[0, 2], [2, 0]])) = exp(-1)
    out = diversity_loss(T([[0.0], [1.0]]), T([[0.0, 0.0], [1.0, 3.0]]))
    assert out.item() == pytest.approx(math.exp(-1), rel=1e-6)


def test_ccvr_combined_statistics_equal_the_pooled_ones():
    rng = np.random.default_rng(0)
    a, b = torch.from_numpy(rng.normal(size=(5, 3))), torch.from_numpy(rng.normal(2, 1, size=(7, 3)))
    ya, yb = torch.zeros(5, dtype=torch.long), torch.zeros(7, dtype=torch.long)
    parts = [class_statistics(a, ya, 1)[0], class_statistics(b, yb, 1)[0]]
    n, mean, cov = combine_statistics(parts)
    pooled = torch.cat([a, b])
    assert n == 12 and torch.allclose(mean, pooled.mean(0)) and torch.allclose(cov, torch.cov(pooled.T))


def test_soft_cross_entropy_of_one_hot_is_cross_entropy():
    logits, y = T([[1.0, 2.0, 0.5]]), T([1])
    assert soft_cross_entropy(logits, nn.functional.one_hot(y, 3).float()).item() == pytest.approx(
        nn.functional.cross_entropy(logits, y).item()
    )


def test_fedgen_is_fedavg_before_its_start_round():
    fedgen = build_algorithm("fedgen", start_round=31)
    fedgen._trained = False
    ctx = SimpleNamespace(round=29, round_metrics={})
    fedgen.server_update(ctx, None, [])  # round 29: no generator step (it would need the clients' models)
    assert not fedgen._trained and ctx.round_metrics == {}


def test_ccvr_pooled_statistics_folded_client_by_client_equal_the_pool_of_all():
    """CCVR's server folds each client's class statistics into one running pool (a d×d covariance per class, not per
    client: at d = 1,568 and 100 clients the list of parts took 24 GB). Pooling is associative: folding pairwise
    gives the pool of all parts, one-sample parts included."""
    g = torch.Generator().manual_seed(3)
    rows = [torch.randn(n, 4, generator=g, dtype=torch.float64) for n in (1, 5, 2, 1, 7)]
    parts = [class_statistics(h, torch.zeros(len(h), dtype=torch.long), 1)[0] for h in rows]
    folded = parts[0]
    for part in parts[1:]:
        folded = combine_statistics([folded, part])
    n, mean, cov = combine_statistics(parts)
    assert folded[0] == n == 16
    torch.testing.assert_close(folded[1], mean)
    torch.testing.assert_close(folded[2], cov)


# The smoke workflow's baselines table runs FedAvg, the swept FedProx and FedData through Snakemake and MLflow; every
# other baseline trains its smoke cell here, with the smoke config's parameters (a process per cell costs more than
# the cell).
SMOKE_BASELINES = ["scaffold", "fednova", "moon", "fedmix", "naivemix", "feddecorr", "fedlc", "fedntd", "fedbr", "ccvr",
                   "fedgen"]  # fmt: skip


@pytest.fixture(scope="module")
def smoke_baselines(synthetic_root, tmp_path_factory):
    """The smoke config, its baselines' preset and their partition file as the ``partition`` rule writes it."""
    from conftest import REPO

    from fed.config import FLConfig, resolve_preset
    from fed.data.partition import write_partition
    from fed.validate import checked_files

    config, _ = checked_files([REPO / "config/smoke.yaml"], REPO)
    table = config["tables"]["baselines"]
    assert not set(SMOKE_BASELINES) & set(table["methods"])  # each baseline once, there or here
    preset = resolve_preset(config["presets"], table["preset"])
    spec = config["partitions"][table["partitions"][0]]
    part = write_partition("synthetic", synthetic_root, spec, preset, 0, tmp_path_factory.mktemp("part") / "seed0.json")
    return config, FLConfig.from_preset(preset, "synthetic"), part


@pytest.mark.slow
@pytest.mark.parametrize("name", SMOKE_BASELINES)
def test_every_baseline_trains_its_smoke_cell(name, smoke_baselines, synthetic_root, tmp_path):
    from fed.config import MethodSpec
    from fed.runner import run_cell

    config, preset, part = smoke_baselines
    spec = MethodSpec.from_config(name, config["methods"][name])
    record = run_cell(preset, spec, "synthetic", synthetic_root, part, 0, tmp_path, progress=None)
    assert record["rounds_completed"] == preset.rounds and not record["diverged"] and record["identity"]
    assert [row["round"] for row in record["history"]] == list(range(1, preset.rounds + 1))
    assert (tmp_path / "metrics.json").is_file() and (tmp_path / "history.csv").is_file()
