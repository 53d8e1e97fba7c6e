"""DP-SGD's per-sample clipping without per-sample gradients, for a sample that spans several rows of a batch.

DA-FL's discriminator clips, for each index i of a Poisson batch, the gradient of its real and its fake image
together (Algorithm 2, lines 7-12). Opacus' hooks mode does it by materialising every row's gradient (≈ 60 % of a
step on a CPU); its ghost clipping (1.6) clips each row alone and still materialises a convolution's per-row
gradients (it has ghost norms for Linear and Embedding only). Here, mixed ghost clipping (Bu et al., "Scalable and
Efficient Training of Large Convolutional Neural Networks with Differential Privacy", arXiv:2205.10683): a
convolution's per-sample weight gradient is Σ_t b_t a_tᵀ over positions t (``a`` its unfolded input, ``b`` its
output gradient), whose squared norm is Σ_{t,t'} (a_t·a_t')(b_t·b_t'); a sample's rows are just more positions.
Each layer takes the cheaper of that and the gradient itself. The clipped sum Σ_i c_i g_i is then one weight
gradient of the whole batch with each row's output gradient scaled by its sample's c_i.

The clip factor is Opacus' (``DPOptimizer.clip_and_accumulate``: c_i = min(1, C / (‖g_i‖ + 1e-6))); the noise, the
scaling and the accountant stay Opacus' (``DPOptimizerFastGradientClipping`` reads the clipped sum from ``.grad``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

Record = tuple[nn.Module, torch.Tensor, torch.Tensor]  # a layer, its input and its output in one forward pass


def _layers(module: nn.Module) -> list[nn.Module]:
    """The layers of ``module`` that hold parameters; an error for any this file cannot clip exactly."""
    layers = [m for m in module.modules() if any(p.requires_grad for p in m.parameters(recurse=False))]
    for m in layers:
        if isinstance(m, nn.Conv2d):
            ok = m.groups == 1 and m.padding_mode == "zeros" and not isinstance(m.padding, str)
        elif isinstance(m, nn.InstanceNorm2d):
            ok = m.affine and not m.track_running_stats
        elif isinstance(m, nn.Embedding):
            ok = m.padding_idx is None and m.max_norm is None and not m.scale_grad_by_freq and not m.sparse
        else:
            ok = False
        if not ok:
            raise ValueError(
                f"ghost clipping covers Conv2d (groups 1, zero padding given as numbers), affine InstanceNorm2d "
                f"without running statistics and plain Embedding; not {m!r}"
            )
    return layers


@contextmanager
def recording(module: nn.Module) -> Iterator[list[Record]]:
    """Record every parametrised layer's input and output during the forward passes inside the block."""
    records: list[Record] = []
    handles = [m.register_forward_hook(lambda m, args, out: records.append((m, args[0], out))) for m in _layers(module)]
    try:
        yield records
    finally:
        for h in handles:
            h.remove()


def _parts(t: torch.Tensor, n: int) -> torch.Tensor:
    """(k·n, …) rows → (k, n, …): [j, i] is part j of sample i (row j·n + i)."""
    return t.view(len(t) // n, n, *t.shape[1:])


def ghost_is_cheaper(parts: int, positions: int, inputs: int, outputs: int) -> bool:
    """Whether a convolution's ghost norm, two Gram matrices over a sample's parts · positions positions, has fewer
    entries than its per-sample weight gradient (inputs = C_in · kernel area, outputs = C_out): mixed ghost
    clipping's per-layer choice."""
    return 2 * (parts * positions) ** 2 < inputs * outputs


def _layer_input(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What the layer's weight multiplies: an instance norm's normalised input, any other layer's input."""
    return F.instance_norm(x, eps=m.eps) if isinstance(m, nn.InstanceNorm2d) else x


def _squared_norm(m: nn.Module, x: torch.Tensor, b: torch.Tensor, n: int, ghost: bool | None) -> torch.Tensor:
    """‖g_i‖² of the layer's parameters for each of the n samples (``x``: its ``_layer_input``, ``b``: its output
    gradient, by rows)."""
    if isinstance(m, nn.Conv2d):
        a = _parts(F.unfold(x, m.kernel_size, m.dilation, m.padding, m.stride), n)  # (k, n, C_in·kernel, positions)
        g = _parts(b.flatten(2), n)  # (k, n, C_out, positions)
        norm = g.sum((0, 3)).square().sum(1) if m.bias is not None else 0
        if ghost_is_cheaper(len(a), a.shape[3], a.shape[2], g.shape[2]) if ghost is None else ghost:
            pairs = [(j, j2) for j in range(len(a)) for j2 in range(j, len(a))]  # a sample's parts, pair by pair
            return norm + sum(
                (1 if j == j2 else 2) * ((a[j].mT @ a[j2]) * (g[j].mT @ g[j2])).sum((1, 2)) for j, j2 in pairs
            )
        return norm + sum(g[j] @ a[j].mT for j in range(len(a))).square().sum((1, 2))
    if isinstance(m, nn.InstanceNorm2d):
        weight, bias = (b * x).sum((2, 3)), b.sum((2, 3))
        return _parts(weight, n).sum(0).square().sum(1) + _parts(bias, n).sum(0).square().sum(1)
    # Embedding: a row's gradient is b at the row of the weight its index picks; a sample's parts add where they
    # pick the same row
    index, g = _parts(x.reshape(len(x), -1), n), _parts(b.reshape(len(b), -1, b.shape[-1]), n)  # (k, n, L[, dim])
    index, g = index.transpose(0, 1).flatten(1), g.transpose(0, 1).flatten(1, 2)  # (n, k·L[, dim])
    same = index[:, :, None] == index[:, None, :]
    return ((g @ g.mT) * same).sum((1, 2))


def _clipped_sum(m: nn.Module, x: torch.Tensor, b: torch.Tensor) -> None:
    """Set the layer's ``.grad`` to Σ_rows of its gradient from ``x`` (its ``_layer_input``) and output gradient
    ``b`` (already scaled by c_i)."""
    if isinstance(m, nn.Conv2d):
        m.weight.grad = torch.nn.grad.conv2d_weight(x, m.weight.shape, b, m.stride, m.padding, m.dilation)
        if m.bias is not None:
            m.bias.grad = b.sum((0, 2, 3))
    elif isinstance(m, nn.InstanceNorm2d):
        m.weight.grad = (b * x).sum((0, 2, 3))
        m.bias.grad = b.sum((0, 2, 3))
    else:  # a product with the one-hot rows, not index_add_: deterministic on a GPU too
        picked = F.one_hot(x.reshape(-1), m.num_embeddings).to(b.dtype)
        m.weight.grad = picked.T @ b.reshape(-1, b.shape[-1])


def clip_per_sample(
    records: list[Record], row_losses: torch.Tensor, n: int, max_grad_norm: float, ghost: bool | None = None
) -> torch.Tensor:
    """Set each recorded layer's parameter ``.grad`` to Σ_i c_i g_i, where g_i is the gradient of the summed losses
    of sample i's rows (rows i, n + i, 2n + i, … of ``row_losses``) and c_i = min(1, C / (‖g_i‖ + 1e-6)), C =
    ``max_grad_norm``. Returns ‖g_i‖. ``ghost``: force (True) or forbid (False) the ghost norm in every
    convolution; None takes the cheaper one per layer."""
    backprops = torch.autograd.grad(row_losses.sum(), [out for _, _, out in records])
    with torch.no_grad():
        inputs = [_layer_input(m, x) for m, x, _ in records]
        squared = sum(_squared_norm(m, x, b, n, ghost) for (m, _, _), x, b in zip(records, inputs, backprops))
        norms = squared.sqrt()
        factor = (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
        for (m, _, _), x, b in zip(records, inputs, backprops):
            rows = factor.repeat(len(b) // n)  # row j·n + i takes c_i
            _clipped_sum(m, x, b * rows.view(-1, *[1] * (b.dim() - 1)))
    return norms
