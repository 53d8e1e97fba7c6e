"""SCAFFOLD (Karimireddy et al., ICML 2020), Algorithm 1 with option II for the client control variate.

    local step      y ← y − η_l (g_i(y) − c_i + c)
    after K steps   c_i⁺ = c_i − c + (x − y) / (K η_l)                       (option II)
    server          x ← x + η_g · mean_i (y_i − x),   c ← c + |S|/N · mean_i (c_i⁺ − c_i)

The paper's local step is plain SGD. With momentum ρ (DA-FL's preset) the correction must stay out of the momentum
buffer: as a gradient term it is accumulated to (c − c_i)/(1 − ρ) per step while option II still divides the
displacement by K η_l, so the error of c_i is multiplied by about 1 − 1/(1 − ρ) each round — undamped at ρ = 0.5,
divergent above. NIID-Bench (whose SCAFFOLD DA-FL runs) subtracts η_l (c − c_i) from the weights after each
``optimizer.step()``; so do we (``correction: after_step``). ``correction: in_loss`` adds the linear term
⟨w, c − c_i⟩ to the loss instead (its gradient is the correction): the same update without momentum, through the
momentum with it. c_i lives in the client store (on disk), c in the method state (checkpointed).

Initialisation (``control_init``): Algorithm 1 takes the initial c and c_i as inputs; we start them at 0
(``zeros``, the default). NIID-Bench (``experiments.py``, the scaffold branch of ``main``) builds ``c_global`` as a
freshly initialised network and loads its weights into every client's ``c_nets[i]`` (``random_net``): c = c_i = w₀,
a draw independent of the global model's. With every c_i equal to c the first correction is 0 either way, but a
client not yet sampled keeps c_i = w₀, and c keeps (1 − |S|/N)·w₀ after the first round: under partial
participation the runs differ. Our w₀ is a model of the run's architecture, initialised from its own stream
(``ctx.seed_int("scaffold_control_init")``) and rebuilt identically on resume. NIID-Bench's c spans the whole
``state_dict`` (BN buffers too); ours the parameters.

Averaging c (``control_average``): the paper and NIID-Bench average the Δc_i uniformly (``uniform``, the default),
keeping c the plain mean of the c_i, while the models are averaged by data share. ``data`` keeps c = Σ_i p_i c_i with
p_i = n_i / Σ_j n_j over all clients instead (c ← c + Σ_{i∈S} p_i Δc_i): with clients of very unequal size the
uniform c gives a 72-image client the weight of an 11,000-image one (a diagnostic, docs/results/dafl.md).
"""

from __future__ import annotations

import torch

from fed.algorithms.base import Algorithm, ClientResult


def control_variate_update(
    c_i: list[torch.Tensor], c: list[torch.Tensor], x: list[torch.Tensor], y: list[torch.Tensor], steps: int, lr: float
) -> list[torch.Tensor]:
    """Option II: c_i⁺ = c_i − c + (x − y) / (K η_l)."""
    return [ci - cg + (xg - yl) / (steps * lr) for ci, cg, xg, yl in zip(c_i, c, x, y)]


class Scaffold(Algorithm):
    name = "scaffold"
    vectorise = True

    def __init__(
        self,
        global_lr: float = 1.0,
        correction: str = "after_step",
        control_init: str = "zeros",
        control_average: str = "uniform",
    ):
        if correction not in ("after_step", "in_loss"):
            raise ValueError(f"scaffold: correction after_step|in_loss, got {correction!r}")
        if control_init not in ("zeros", "random_net"):
            raise ValueError(f"scaffold: control_init zeros|random_net, got {control_init!r}")
        if control_average not in ("uniform", "data"):
            raise ValueError(f"scaffold: control_average uniform|data, got {control_average!r}")
        self.global_lr, self.correction, self.control_init = global_lr, correction, control_init
        self.control_average = control_average
        self.c: list[torch.Tensor] | None = None
        self._c0: list[torch.Tensor] | None = None  # every c_i before its client's first update

    def setup(self, ctx):
        if self.control_init == "zeros":
            self._c0 = [torch.zeros_like(p) for p in ctx.model.parameters()]
        else:  # NIID-Bench: the weights of a freshly initialised network, from a stream of its own
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(ctx.seed_int("scaffold_control_init"))
                self._c0 = [p.detach().clone() for p in ctx.new_model().parameters()]
        self.c = [t.clone() for t in self._c0]

    def local_loss(self, model, x, y, local, ctx):
        loss = super().local_loss(model, x, y, local, ctx)
        if self.correction == "after_step":
            return loss
        return loss + sum((w * d).sum() for w, d in zip(model.parameters(), local.extra["correction"]))

    def after_step(self, model, local, ctx):
        if self.correction == "after_step":  # y ← y − η_l (c − c_i), outside the optimiser's momentum
            with torch.no_grad():
                for w, d in zip(model.parameters(), local.extra["correction"]):
                    w.sub_(d, alpha=ctx.round_lr())

    def client_update(self, ctx, client) -> ClientResult:
        ctx.model.load_state_dict(ctx.global_state)
        x_global = [p.detach().clone() for p in ctx.model.parameters()]
        c_i = ctx.load_client_state(client).get("c_i") or [t.clone() for t in self._c0]
        result = self.train_locally(
            ctx, client, *ctx.client_data(client), extra={"correction": [cg - ci for cg, ci in zip(self.c, c_i)]}
        )
        c_new = control_variate_update(
            c_i, self.c, x_global, [p.detach() for p in ctx.model.parameters()], result.steps, ctx.round_lr()
        )
        ctx.save_client_state(client, {"c_i": c_new})
        result.extra["delta_c"] = [a - b for a, b in zip(c_new, c_i)]
        return result

    def aggregate(self, ctx, results):
        new = super().aggregate(ctx, results)
        if self.global_lr != 1.0:
            for name, _ in ctx.model.named_parameters():
                x = ctx.global_state[name]
                new[name] = x + self.global_lr * (new[name] - x)
        return new

    def server_update(self, ctx, model, results):
        if self.control_average == "data":  # c ← c + Σ_{i∈S} p_i Δc_i, p_i = n_i / Σ_j n_j over all clients
            sizes = ctx.client_sizes()
            p = torch.tensor([sizes[r.client] / sum(sizes) for r in results], dtype=self.c[0].dtype)
            p = p.to(self.c[0].device)
        for j, c in enumerate(self.c):
            delta = torch.stack([r.extra["delta_c"][j] for r in results])
            if self.control_average == "uniform":  # c ← c + |S|/N · mean_i Δc_i
                c += len(results) / ctx.num_clients * delta.mean(0)
            else:
                c += torch.tensordot(p, delta, dims=1)

    def state_dict(self):
        return {"c": self.c}

    def load_state_dict(self, state):
        self.c = state["c"]
