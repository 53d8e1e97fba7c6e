"""Whether a trained model has collapsed: which of its ReLU units still fire on a set of inputs. A diagnostic read
after training (``scripts/active_units.py``), outside the training path, so it changes no run's identity."""

from __future__ import annotations

from typing import Any

import torch


def unit_activity(model: torch.nn.Module, x: torch.Tensor, batch: int = 1000) -> list[dict[str, Any]]:
    """For each ReLU module of ``model`` (eval mode) that runs on ``x``: the share of its outputs that are positive
    (``active``) and the share of its units — channels of a feature map, neurons of a vector — positive on none of
    the inputs (``dead``: no gradient from these inputs reaches such a unit's weights). A layer dead on every input
    makes the model predict one class whatever its input."""
    layers = {m: n for n, m in model.named_modules() if isinstance(m, torch.nn.ReLU)}
    counts: dict[torch.nn.Module, list] = {}  # module → [positive outputs, outputs, units ever positive]

    def record(module, args, out):
        on = out > 0
        fired = on.transpose(0, 1).flatten(1).any(1)  # per unit (dimension 1), over the batch and positions
        c = counts.setdefault(module, [0, 0, torch.zeros_like(fired)])
        c[0], c[1], c[2] = c[0] + int(on.sum()), c[1] + on.numel(), c[2] | fired

    handles = [m.register_forward_hook(record) for m in layers]
    model.eval()
    try:
        with torch.no_grad():
            for chunk in x.split(batch):
                model(chunk)
    finally:
        for h in handles:
            h.remove()
    return [
        {"layer": layers[m], "units": len(ever), "active": on / total, "dead": float((~ever).float().mean())}
        for m, (on, total, ever) in counts.items()
    ]
