"""One communication round: sample, train the sampled clients, aggregate, update on the server."""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from fed.algorithms.base import Algorithm
from fed.batched import BatchedRound
from fed.context import Context
from fed.training import state_copy


def run_round(ctx: Context, algorithm: Algorithm) -> dict[str, Any]:
    """Advance ``ctx`` by one round; returns the round's history row (``diverged`` set when the loss or the
    new global weights are non-finite). Evaluation is the caller's choice (``fed.evaluation``)."""
    ctx.round += 1
    t0 = time.perf_counter()
    ctx.round_metrics = {}
    clients = algorithm.select_clients(ctx)
    together = ctx.cfg.trains_together(ctx.device) and algorithm.vectorise and len(clients) > 1
    if together:  # one batched computation (fed.batched): the same numbers to rounding
        ctx.batched = BatchedRound(ctx)
        try:
            results = ctx.batched.run(algorithm, clients)
        finally:
            ctx.batched = None
    else:
        results = []
        for client in clients:
            torch.manual_seed(ctx.seed_int("client", ctx.round, client))  # for methods using torch's global RNG
            results.append(algorithm.client_update(ctx, client))
    ctx.model.load_state_dict(algorithm.aggregate(ctx, results))
    algorithm.server_update(ctx, ctx.model, results)
    ctx.global_state = state_copy(ctx.model)
    n = sum(r.num_samples for r in results)
    row: dict[str, Any] = {
        "round": ctx.round,
        "train_loss": sum(r.train_loss * r.num_samples for r in results) / max(n, 1),
        "local_steps": sum(r.steps for r in results),
        **ctx.round_metrics,
        **({"batched_clients": len(clients)} if together else {}),  # which path trained the round
    }
    row["diverged"] = not math.isfinite(row["train_loss"]) or not all(
        torch.isfinite(v).all() for v in ctx.global_state.values() if v.is_floating_point()
    )
    row["seconds"] = time.perf_counter() - t0
    return row
