"""fed.ghost_clipping: DP-SGD's per-sample clipping of a sample made of several rows, without per-sample gradients."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fed.ghost_clipping import clip_per_sample, recording
from fed.models.cgan import Discriminator


@pytest.fixture(autouse=True)
def _float64():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def clipped_by_hand(model, x, y, target, n, max_grad_norm):
    """The rule written out: sample i's gradient is that of its rows i and n + i together (one backward each),
    c_i = min(1, C / (‖g_i‖ + 1e-6)), the result Σ_i c_i g_i."""
    grads = []
    for i in range(n):
        model.zero_grad()
        rows = [i, n + i]
        F.binary_cross_entropy_with_logits(model(x[rows], y[rows]), target[rows], reduction="sum").backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    norms = torch.stack([sum(g.square().sum() for g in sample).sqrt() for sample in grads])
    factor = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    return norms, [sum(factor[i] * grads[i][k] for i in range(n)) for k in range(len(grads[0]))]


@pytest.mark.parametrize("ghost", [None, True, False])
def test_a_samples_real_and_fake_rows_are_clipped_together(ghost):
    """DA-FL's discriminator (convolutions, instance norms, a label embedding): norms and clipped sum equal the
    per-sample rule, whichever way each convolution's norm is computed (ghost, direct, or the cheaper one per layer);
    C is the median norm, so some samples are clipped and others not, and one sample's rows carry different labels
    (its embedding rows then do not add)."""
    torch.manual_seed(0)
    model, n = Discriminator(num_classes=3, channels=1, width=4), 5
    x, y = torch.randn(2 * n, 1, 32, 32), torch.randint(0, 3, (2 * n,))
    y[n:] = y[:n]
    y[n + 1] = (y[1] + 1) % 3
    target = torch.cat([torch.ones(n), torch.zeros(n)])
    norms, _ = clipped_by_hand(model, x, y, target, n, 1.0)
    max_grad_norm = norms.median().item()
    norms, want = clipped_by_hand(model, x, y, target, n, max_grad_norm)
    assert 0 < (norms > max_grad_norm).sum() < n
    model.zero_grad()
    with recording(model) as records:
        logits = model(x, y)
    rows = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    got = clip_per_sample(records, rows, n, max_grad_norm, ghost)
    torch.testing.assert_close(got, norms, rtol=1e-12, atol=1e-12)
    for p, w in zip(model.parameters(), want, strict=True):
        torch.testing.assert_close(p.grad, w, rtol=1e-12, atol=1e-12)


class Lookup(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(3, 2)

    def forward(self, index, weight):
        return (self.embed(index) * weight).sum(1)


@pytest.mark.parametrize(("rows", "norm"), [((0, 0), 10.0), ((0, 2), 50**0.5)])
def test_a_samples_embedding_rows_add_where_they_pick_the_same_row(rows, norm):
    """Hand-computed: a sample of two rows whose loss gradients at the embedding are (3, 4) each has gradient
    (6, 8) at one row (norm 10) if both pick it, and (3, 4) at two rows (norm √50) if not; C = 5 scales the sum by
    5 / norm."""
    model = Lookup()
    index, weight = torch.tensor(rows), torch.tensor([[3.0, 4.0], [3.0, 4.0]])
    with recording(model) as records:
        out = model(index, weight)
    got = clip_per_sample(records, out, 1, 5.0)
    assert got.item() == pytest.approx(norm)
    want = torch.zeros(3, 2).index_add_(0, index, weight) * 5 / (norm + 1e-6)
    torch.testing.assert_close(model.embed.weight.grad, want)


@pytest.mark.parametrize(
    "layer",
    [
        nn.Linear(2, 2),
        nn.BatchNorm2d(2),
        nn.Conv2d(2, 2, 3, groups=2),
        nn.Conv2d(2, 2, 3, padding="same"),
        nn.Conv2d(2, 2, 3, padding=1, padding_mode="reflect"),
        nn.InstanceNorm2d(2, affine=True, track_running_stats=True),
        nn.Embedding(3, 2, padding_idx=0),
        nn.Embedding(3, 2, max_norm=1.0),
        nn.Embedding(3, 2, scale_grad_by_freq=True),
        nn.Embedding(3, 2, sparse=True),
    ],
)
def test_a_layer_it_cannot_clip_exactly_is_an_error(layer):
    with pytest.raises(ValueError, match="ghost clipping covers Conv2d"), recording(nn.Sequential(layer)):
        pass


class Mixed(nn.Module):
    """What the discriminator does not exercise: an embedding of index pairs, convolutions without bias (one dilated;
    the other not before a norm, which would zero a bias's gradient), an instance norm of eps 0.01 (the functional
    default is 1e-5)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(4, 8)
        self.conv = nn.Conv2d(2, 3, 3, stride=2, padding=1, dilation=2, bias=False)
        self.norm = nn.InstanceNorm2d(3, affine=True, eps=0.01)
        self.head = nn.Conv2d(3, 1, 2, bias=False)

    def forward(self, x, index):
        plane = F.interpolate(self.embed(index).reshape(len(x), 1, 4, 4), size=8)
        h = F.leaky_relu(self.norm(self.conv(torch.cat([x, plane], 1))), 0.2)
        return self.head(h).sum((1, 2, 3))


@pytest.mark.parametrize("ghost", [None, True, False])
def test_three_rows_a_sample_through_other_layers(ghost):
    """Samples of three rows each (rows i, n + i, 2n + i): the per-sample rule, by hand, for the layers' other
    options; the first sample's rows pick the same embedding rows, the others' do not."""
    torch.manual_seed(1)
    model, n = Mixed(), 4
    x, index = torch.randn(3 * n, 1, 8, 8), torch.randint(0, 4, (3 * n, 2))
    index[n] = index[2 * n] = index[0]
    target = torch.rand(3 * n)
    grads = []
    for i in range(n):
        model.zero_grad()
        rows = [i, n + i, 2 * n + i]
        F.binary_cross_entropy_with_logits(model(x[rows], index[rows]), target[rows], reduction="sum").backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    norms = torch.stack([sum(g.square().sum() for g in sample).sqrt() for sample in grads])
    max_grad_norm = norms.median().item()
    factor = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    model.zero_grad()
    with recording(model) as records:
        logits = model(x, index)
    rows = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    torch.testing.assert_close(clip_per_sample(records, rows, n, max_grad_norm, ghost), norms, rtol=1e-12, atol=1e-12)
    for k, p in enumerate(model.parameters()):
        want = sum(factor[i] * grads[i][k] for i in range(n))
        torch.testing.assert_close(p.grad, want, rtol=1e-12, atol=1e-12)


def test_each_convolution_takes_the_cheaper_norm_and_a_forced_choice_is_obeyed(monkeypatch):
    """Hand-computed for DA-FL's discriminator at width 64 (real and fake: 2 parts): conv1 (16×16 positions, 2·16
    inputs, 64 outputs): 2·512² = 524,288 Gram entries against 2,048, the gradient; conv2 (8×8, 64·16, 128): 32,768
    against 131,072, ghost; conv3 (4×4, 128·16, 256): 2,048 against 524,288, ghost; conv4 (1, 256·16, 1): 8 against
    4,096, ghost. ``ghost=True/False`` never asks; None asks with each layer's sizes."""
    from fed import ghost_clipping

    assert [ghost_clipping.ghost_is_cheaper(2, t, d, c) for t, d, c in [(256, 32, 64), (64, 1024, 128)]] == [
        False,
        True,
    ]
    assert [ghost_clipping.ghost_is_cheaper(2, t, d, c) for t, d, c in [(16, 2048, 256), (1, 4096, 1)]] == [True, True]
    assert ghost_clipping.ghost_is_cheaper(1, 4, 4, 8) is False  # 2 · 16 = 32 entries against 32: not fewer
    assert ghost_clipping.ghost_is_cheaper(1, 4, 5, 8) is True  # 32 against 40
    asked = []
    real = ghost_clipping.ghost_is_cheaper
    monkeypatch.setattr(ghost_clipping, "ghost_is_cheaper", lambda *a: asked.append(a) or real(*a))
    model, n = Discriminator(num_classes=3, channels=1, width=4), 2
    layers = [(2, 256, 2 * 16, 4), (2, 64, 4 * 16, 8), (2, 16, 8 * 16, 16), (2, 1, 16 * 16, 1)]  # width 4
    for ghost, wanted in ((True, []), (False, []), (None, layers)):
        asked.clear()
        with recording(model) as records:
            logits = model(torch.randn(2 * n, 1, 32, 32), torch.tensor([0, 1, 0, 1]))
        clip_per_sample(records, logits, n, 1.0, ghost)
        assert asked == wanted


def test_recording_leaves_no_hook_and_the_generators_step_sees_a_frozen_discriminator():
    """A hook left behind would keep every later pass's activations alive (memory growing with each GAN step), and a
    discriminator not frozen for the generator's step would compute gradients nobody reads: neither changes a number,
    so this pins the contracts themselves."""
    from fed.dpgan import _GhostClipping, _OpacusClipping

    model = Discriminator(num_classes=3, channels=1, width=4)
    with recording(model) as records:
        model(torch.randn(2, 1, 32, 32), torch.tensor([0, 1]))
    assert records and not any(m._forward_hooks for m in model.modules())
    for clipping in (_GhostClipping(model), _OpacusClipping(Discriminator(3, 1, 4), functorch=False)):
        with clipping.frozen() as D:
            assert not any(p.requires_grad for p in D.parameters())
        assert all(p.requires_grad for p in clipping.D.parameters())
