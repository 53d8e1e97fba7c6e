"""Fed-ZDA (Hao et al., CVPRW 2021): zero-shot data augmentation with ZSDG (``fed.zsdg``).

- Fed-ZDAC (Algorithm 2): each selected client generates labelled data over all classes from the received
  global model M_G,t-1 and updates it on the union of its real data and the synthetic data.
- Fed-ZDAS (Algorithm 3): clients train as in FedAvg; the server generates an equal amount of data for every
  class from each received client model M_i,t, combines it into one balanced set, aggregates the models into
  the interim global model and trains it on the combined synthetic set.

Both run plain FedAvg before ``start_round`` (Sec. 4.6), which lets a run warm-start from a FedAvg checkpoint.
"""

from __future__ import annotations

import copy
import time

import torch
import torch.nn.functional as F

from fed.algorithms.base import Algorithm, ClientResult
from fed.stages import Stage
from fed.zsdg import ZSDGConfig, bn_layers, zsdg_batched


class _ZeroShotAugmentation(Algorithm):
    def __init__(self, start_round: int = 1, zsdg: dict | None = None):
        if start_round < 1:
            raise ValueError(f"start_round must be >= 1, got {start_round}")
        self.start_round = start_round
        self.zsdg = ZSDGConfig.from_params(zsdg)

    @property
    def fedavg_until(self) -> int:
        return self.start_round

    def stages(self):
        # FedAvg before start_round: continue from the shared FedAvg prefix instead of recomputing it
        return {"warm": Stage.of("fedavg_prefix", rounds=self.start_round - 1)} if self.start_round > 1 else {}

    def setup(self, ctx):
        bn_layers(ctx.model)  # fail before round 1 if the model cannot be inverted

    def augmenting(self, ctx) -> bool:
        return ctx.round >= self.start_round

    def generate(self, ctx, model, keys: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """ZSDG from ``model``, one batch per key with the stream (seed, "zsdg", round, key), optimised together;
        cost and quality go to the round's metrics (seconds, mean source-model accuracy on the samples)."""
        t0 = time.perf_counter()
        batches = zsdg_batched(
            model,
            ctx.num_classes,
            ctx.input_shape,
            self.zsdg,
            [ctx.rng("zsdg", ctx.round, k) for k in keys],
            ctx.device,
            ctx.memory_format,
        )
        m = ctx.round_metrics
        for _, y, info in batches:
            n = m.get("zsdg_calls", 0)
            m["zsdg_source_acc"] = (m.get("zsdg_source_acc", 0.0) * n + info["source_acc"]) / (n + 1)
            m["zsdg_calls"] = n + 1
            m["synthetic_samples"] = m.get("synthetic_samples", 0) + len(y)
        m["zsdg_seconds"] = m.get("zsdg_seconds", 0.0) + time.perf_counter() - t0
        return [(x, y) for x, y, _ in batches]


class FedZDAC(_ZeroShotAugmentation):
    """Every sampled client inverts the same global model M_G,t-1, so with ``batch_clients`` their ZSDG batches are
    optimised in one pass at the round's first client update (same result as one by one, to rounding). ``"auto"``
    (default) batches on a GPU only: there it measured 9x faster than client by client, on one CPU thread 0.55-0.76x
    as fast (benchmarks/zsdg_time.py, docs/results/performance.md)."""

    name = "fedzdac"
    vectorise = True

    def __init__(self, start_round: int = 1, zsdg: dict | None = None, batch_clients: bool | str = "auto"):
        super().__init__(start_round, zsdg)
        if batch_clients not in (True, False, "auto"):
            raise ValueError(f"fedzdac: batch_clients must be true, false or 'auto', got {batch_clients!r}")
        self.batch_clients = batch_clients
        self._round_clients: list[int] = []
        self._fakes: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def batching(self, ctx) -> bool:
        return ctx.device.type != "cpu" if self.batch_clients == "auto" else self.batch_clients

    def select_clients(self, ctx):
        clients = super().select_clients(ctx)
        self._round_clients = clients
        self._fakes = {}
        return clients

    def client_update(self, ctx, client) -> ClientResult:
        if not self.augmenting(ctx):
            return super().client_update(ctx, client)
        ctx.model.load_state_dict(ctx.global_state)
        if client not in self._fakes:
            keys = [k for k in self._round_clients if k not in self._fakes] if self.batching(ctx) else [client]
            self._fakes.update(zip(keys, self.generate(ctx, ctx.model, keys)))
            ctx.model.load_state_dict(ctx.global_state)
        x_fake, y_fake = self._fakes.pop(client)
        x, y = ctx.client_data(client)
        return self.train_locally(ctx, client, torch.cat([x, x_fake]), torch.cat([y, y_fake]))


class FedZDAS(_ZeroShotAugmentation):
    name = "fedzdas"
    vectorise = True

    def __init__(
        self,
        start_round: int = 1,
        zsdg: dict | None = None,
        server_epochs: int = 1,
        server_lr: float | None = None,
        keep_bn_statistics: bool = True,
    ):
        super().__init__(start_round, zsdg)
        self.server_epochs, self.server_lr = server_epochs, server_lr
        # Server training runs BN in train mode: ~1,000 generated images would overwrite the aggregated model's
        # running statistics (weight 0.9^100 left on the real ones after 100 steps). Keep the real-data ones.
        self.keep_bn_statistics = keep_bn_statistics

    def server_update(self, ctx, model, results) -> None:
        if not self.augmenting(ctx):
            return
        source = copy.deepcopy(model)  # a scratch model to load each received client model into
        fakes = []
        for r in results:
            source.load_state_dict(r.state)
            fakes += self.generate(ctx, source, [r.client])
        x, y = (torch.cat(parts) for parts in zip(*fakes))
        real_statistics = {k: v.clone() for k, v in model.state_dict().items() if _is_bn_buffer(k)}
        ctx.round_metrics["server_loss"] = ctx.train(
            model,
            x,
            y,
            lambda xb, yb: F.cross_entropy(model(xb), yb),
            ctx.rng("server", ctx.round),
            epochs=self.server_epochs,
            lr=self.server_lr,
        ).loss
        if self.keep_bn_statistics:
            model.load_state_dict(real_statistics, strict=False)


def _is_bn_buffer(key: str) -> bool:
    return key.endswith(("running_mean", "running_var", "num_batches_tracked"))
