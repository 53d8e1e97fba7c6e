"""Evaluation as the papers define it: the global model on the external test set (accuracy, per-class accuracy,
class-level variance) and on every client's local test split (mean local accuracy, client-level variance, and the
pooled accuracy over all of those records as one set)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fed.context import Context
from fed.metrics import group_accuracy, per_class_accuracy, variance
from fed.training import predict


def evaluate(ctx: Context) -> dict[str, Any]:
    """Metrics of ``ctx.global_state``, BN in eval mode (the working model is overwritten)."""
    ctx.model.load_state_dict(ctx.global_state)
    mf = ctx.memory_format
    pred = predict(ctx.model, ctx.test_set.x, memory_format=mf).cpu().numpy()
    y = ctx.test_set.y.cpu().numpy()
    per_class = per_class_accuracy(pred, y, ctx.num_classes)
    local_idx = torch.cat(ctx.test_idx).to(ctx.device)
    groups = np.repeat(np.arange(ctx.num_clients), [len(t) for t in ctx.test_idx])
    local_pred = predict(ctx.model, ctx.train_set.x[local_idx], memory_format=mf).cpu().numpy()
    local_y = ctx.train_set.y[local_idx].cpu().numpy()
    local = group_accuracy(local_pred, local_y, groups, ctx.num_clients)
    return {
        "global_acc": float(100.0 * (pred == y).mean()),
        "class_acc_variance": variance(per_class),
        "local_acc_mean": float(np.nanmean(local)) if np.isfinite(local).any() else math.nan,
        "client_acc_variance": variance(local),
        # every client's local record at once: the training set's class mix (a tuning run's pooled validation)
        "pooled_acc": float(100.0 * (local_pred == local_y).mean()) if len(local_y) else math.nan,
        "per_class_acc": per_class.tolist(),
        "local_acc": local.tolist(),
    }
