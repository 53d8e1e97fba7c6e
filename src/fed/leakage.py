"""What a shared artifact gives away: the distance to the closest record (DCR), one measure for every method.

The standard test for synthetic data (e.g. SDMetrics' ``DCRBaselineProtection``; Yale et al. 2020): for every
artifact that left a client, is its closest real record (Euclidean, in the model's normalised input space) one of
the *training* records of the client that produced it, or one of the *held-out* records of that client (its local
test split, from the same distribution, never trained on)? With n_t training and n_h held-out records, an artifact
that carries nothing of its own records finds its closest record among the training ones with probability
p = n_t / (n_t + n_h) (the records are exchangeable); raw records always do (distance 0).

**Hubs.** In 784 dimensions the nearest records of images off the data manifold concentrate on a few *hub* records
(200 noise images of FMNIST found 3–12 distinct nearest records among 15,000): a rate over artifacts then rests on
a few coin flips, and every method whose images fall near the same hub gets the same bias (the first audits gave
every model's inversion −0.3 to −0.8, noise −0.81). So the score counts each distinct nearest record once — the
mean hit of the artifacts nearest to it, averaged over those records (``closer_to_train_distinct``; ``chance`` its
p averaged likewise) — and ``distinct_nearest``, the number of such records, is its sample size. The **leakage
score** (rate − p̄) / (1 − p̄) is 0 without evidence of memorisation and 1 for raw records (each its own nearest);
the per-artifact rate (``closer_to_train``) and the median distances are kept beside it.

**Per class, with intervals, and an attack per artifact** (docs/headtohead-protocol.md, section 6): a record's chance
is the training share of its owner's records *of its class* (a class-conditional artifact near a class the client
holds no held-out record of is no evidence: left out and counted; the per-client null is kept beside it), the score
gets a bootstrap interval, and every kind of artifact also faces a membership attack scored alike
(``fed.membership``): records by their distance to the closest artifact, and — what the server receives — the
clients' updates of one more round by the loss of their own records (``update_attack``).

What is audited (``shared_artifacts``), in input space, by the method's own code with the run's seeds:
- FedData: the raw samples each client shares;
- FedMix, FedBR: the mean batches;
- DA-FL: the DP-CGAN samples each client sends;
- FedDPMS: the images Stage I's global decoder makes of every noisy latent mean a donor kept and uploaded (the
  server holds them all and forwards some; a receiver decodes its share the same way); the donor is the owner;
- every method: **model inversion** of what any method sends, its model — ZSDG (Fed-ZDA's generator) run on the run's
  final global model (the server holds it, so does every client). It is a population statistic, so its records are
  all clients' training records pooled and its held-out set all their held-out splits pooled (the same clients, so
  the same class mix; chance n_t / (n_t + n_h) as for a client). FedAvg's row is this one alone.
  (ZSDG needs BatchNorm: a model without it has no inversion row.)
- FLea: the features each client shares, decoded back to inputs by FLea's own reconstruction attacker (Fig. 9c,
  ``fed.attacks``): a decoder trained on public data of the task (the first test images) against the final model's
  extractor θ[:l], applied to the features of each client's shared samples under that model (a client's last
  buffer was extracted by the model of its round; the final one stands in for it). Its records are the client's.
CCVR's class feature statistics are no records: they are counted and sized, not tested.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from fed import checkpoint
from fed.membership import attack, leakage_interval
from fed.rounds import run_round
from fed.zsdg import ZSDGConfig, zsdg

# FLea's reconstruction attacker for the audit: the authors' MinimalDecoder (``kind="code"``) trained by Adam for 10
# epochs on 5,000 public images (the paper's App. D: 20 epochs at lr 1e-3 on CIFAR-10's training set)
RECONSTRUCTION = {"samples": 5000, "epochs": 10, "lr": 1e-3, "optimizer": "adam", "kind": "code"}

# ZSDG for the audit: 5 images a class, 40 iterations (Fed-ZDA's CPU presets: 10 and 50; 100 images × 50 steps of
# FedDPMS' CNN took 44 s a cell on this CPU, the audit's whole cost)
INVERSION = {"per_class": 5, "iterations": 40, "lr": 0.1}


@dataclass
class Shared:
    """Record-like artifacts that left one client (``owner``; -1: the global model's, i.e. every client's)."""

    kind: str
    owner: int
    x: torch.Tensor
    members: torch.Tensor | None = None  # dataset indices of the records it was made from (default: the owner's)


def dcr(artifacts: torch.Tensor, records: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """Each artifact's Euclidean distance to its closest record (both flattened; in float64, where the
    matrix-product expansion puts a record's copy within 1e-5 of 0)."""
    return _nearest(artifacts, records, chunk)[0]


def _nearest(artifacts: torch.Tensor, records: torch.Tensor, chunk: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """Each artifact's distance to its closest record and that record's position."""
    return _both_ways(artifacts, records, chunk)[:2]


def _both_ways(artifacts: torch.Tensor, records: torch.Tensor, chunk: int = 512):
    """``_nearest`` of every artifact, and every record's distance to its closest artifact, from one pass over the
    distances."""
    a, r = artifacts.flatten(1).double(), records.flatten(1).double()
    cols = torch.full((len(r),), float("inf"), dtype=torch.float64, device=r.device)
    if not len(a):
        return a.new_zeros(0), torch.zeros(0, dtype=torch.long, device=a.device), cols
    rows = []
    for part in a.split(chunk):
        d = torch.cdist(part, r)
        rows.append(d.min(1))
        cols = torch.minimum(cols, d.min(0).values)
    return torch.cat([m.values for m in rows]), torch.cat([m.indices for m in rows]), cols


def closer_to_train(artifacts: torch.Tensor, train: torch.Tensor, holdout: torch.Tensor) -> torch.Tensor:
    """Per artifact: 1 where its closest training record is nearer than its closest held-out record, 0 where
    farther, 0.5 on a tie."""
    return _hits(dcr(artifacts, train), dcr(artifacts, holdout))


def _hits(d_train: torch.Tensor, d_hold: torch.Tensor) -> torch.Tensor:
    return (d_train < d_hold).double() + 0.5 * (d_train == d_hold).double()


def leakage_score(rate: float, null: float) -> float:
    """(rate − null) / (1 − null): 0 where artifacts find a training record as closest as often as chance does
    (``null``, the training records' share of all records), 1 where always (raw records)."""
    return (rate - null) / (1 - null)


def shared_artifacts(algorithm, ctx) -> Iterator[Shared]:
    """What the method sent out of the clients as records, after its ``setup`` (and, for FedDPMS, its sharing
    step) has run on ``ctx``."""
    if hasattr(algorithm, "pool") and algorithm.name == "feddata":
        for k, idx in enumerate(algorithm.pool):
            yield Shared("raw_samples", k, ctx.train_set.x[idx], members=idx)
    elif hasattr(algorithm, "x_bar"):  # FedMix, FedBR
        for k in range(ctx.num_clients):
            yield Shared("mean_batches", k, algorithm.x_bar[algorithm.owner == k])
    elif algorithm.name == "dafl":
        for k, (x, _) in enumerate(algorithm._synthetic):
            yield Shared("synthetic_samples", k, x)
    elif algorithm.name == "feddpms":
        decoder = ctx.global_model().extras["decoder"]
        for (j, _), z in sorted(algorithm._uploaded.items()):
            if len(z):
                with torch.no_grad():
                    yield Shared("decoded_latent_means", j, decoder(z.to(ctx.device)))


def item_bytes(algorithm, ctx) -> dict[str, int]:
    """float32 bytes of one item of every kind of the privacy ledger this method can fill (labels, 1 byte a class
    for roles, aside): input-space records, a feature vector at the cut the method shares (FLea's trunk, CCVR's
    embedding), a latent mean, a decoder, a class's feature statistics (mean and covariance, float64, as CCVR
    sends them)."""
    x = ctx.train_set.x[:1]
    model = ctx.global_model()
    sizes = {k: x.numel() * 4 for k in ("raw_samples", "mean_batches", "synthetic_samples", "decoded_latent_means")}
    sizes["class_roles_to_server"] = ctx.num_classes
    with torch.no_grad():
        if algorithm.name == "flea":
            sizes["features"] = model.features(x).numel() * 4
        if algorithm.name == "ccvr":
            d = algorithm._embed(model, x).shape[1]
            sizes["features"], sizes["class_feature_statistics"] = d * 4, (d + d * d + 1) * 8
    if hasattr(model, "extras") and "decoder" in model.extras:
        sizes["noisy_latent_means"] = model.extras["mu"].out_features * 4
        sizes["decoders"] = sum(p.numel() * 4 for p in model.extras["decoder"].parameters())
    return sizes


def _owners(ctx) -> torch.Tensor:
    """The client of every dataset index a client holds (training or held-out); -1 elsewhere."""
    owner = torch.full((len(ctx.train_set.y),), -1, dtype=torch.long)
    for k, (train, hold) in enumerate(zip(ctx.train_idx, ctx.test_idx)):
        owner[train.cpu()], owner[hold.cpu()] = k, k
    return owner


def _class_chance(y_train: torch.Tensor, y_hold: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Per class: the training records' share of the owner's records of that class (nan where it holds none)."""
    t = torch.bincount(y_train.cpu(), minlength=num_classes).double()
    h = torch.bincount(y_hold.cpu(), minlength=num_classes).double()
    return t / (t + h)


def rates(items: list[Shared], ctx) -> dict[str, dict[str, Any]]:
    """Per kind: artifacts, their float32 bytes, and two tests of their records (``audited``: the finite ones of
    owners with held-out records).

    The closest-record test (above): the closer-to-train rate over the distinct nearest records, its chance level
    **per class** — a record's chance is the training share of its owner's records of the nearest record's class, and
    records of classes the owner holds only on one side carry no evidence and are left out (``records_left_out``) —
    the leakage score with its bootstrap interval (``fed.membership``), and the old per-client null beside it
    (``chance_client``, ``leakage_client``); the median distances to the closest training and held-out record.

    The membership attack: each member (a record the artifacts were made from: ``Shared.members``, by default the
    owner's training records) and held-out record of the owner scored by minus its distance to the owner's closest
    artifact, calibrated per (client, class) — the advantage and its interval (``fed.membership.attack``)."""
    owner_of = _owners(ctx)
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        if item.owner < 0:  # the global model's: all clients' training records against all their held-out ones
            train_idx, hold_idx = torch.cat(ctx.train_idx), torch.cat(ctx.test_idx)
        else:
            train_idx, hold_idx = ctx.train_idx[item.owner], ctx.test_idx[item.owner]
        acc = out.setdefault(
            item.kind,
            {"n": 0, "bytes": 0, "non_finite": 0, "hits": [], "d_train": [], "d_hold": [], "nearest": {}, "mia": []},
        )
        acc["n"] += len(item.x)
        acc["bytes"] += item.x.numel() * 4
        finite = torch.isfinite(item.x.flatten(1)).all(1)  # a diverged model's images are NaN: not tested
        acc["non_finite"] += int((~finite).sum())
        if not finite.any() or not len(hold_idx) or not len(train_idx):
            continue
        (train, y_train), (hold, y_hold) = ctx.samples(train_idx), ctx.samples(hold_idx)
        a = item.x[finite].to(train.dtype)
        (d_train, i_train, train_to_a), (d_hold, i_hold, hold_to_a) = _both_ways(a, train), _both_ways(a, hold)
        hits = _hits(d_train, d_hold)
        chance_client = len(train_idx) / (len(train_idx) + len(hold_idx))
        per_class = _class_chance(y_train, y_hold, ctx.num_classes)
        nearer = (d_train <= d_hold).cpu()  # the indices live on the CPU, the distances on the run's device
        record = torch.where(nearer, train_idx[i_train.cpu()], hold_idx[i_hold.cpu()])  # dataset index
        label = torch.where(nearer, y_train[i_train].cpu(), y_hold[i_hold].cpu())
        for r, c, hit in zip(record.tolist(), label.tolist(), hits.tolist()):
            acc["nearest"].setdefault(r, ([], float(per_class[c]), chance_client))[0].append(hit)
        acc["hits"].append(hits)
        acc["d_train"].append(d_train)
        acc["d_hold"].append(d_hold)
        if item.members is None:
            members, to_a = train_idx.cpu(), train_to_a.cpu()
        else:  # a subset of the training records: their distances by position
            position = {i: p for p, i in enumerate(train_idx.tolist())}
            members = item.members.cpu()
            to_a = train_to_a.cpu()[torch.tensor([position[i] for i in members.tolist()], dtype=torch.long)]
        records = torch.cat([members, hold_idx.cpu()])
        member = torch.arange(len(records)) < len(members)
        strata = owner_of[records] * ctx.num_classes + torch.cat(
            [ctx.train_set.y[members.to(ctx.train_set.y.device)].cpu(), y_hold.cpu()]
        )
        acc["mia"].append((-torch.cat([to_a, hold_to_a.cpu()]), member, strata))
    table = {}
    for i, (kind, acc) in enumerate(sorted(out.items())):
        hits = torch.cat(acc["hits"]) if acc["hits"] else torch.zeros(0)
        stats: dict[str, Any] = {"audited": len(hits)}
        if len(hits):
            h, p, p_client = zip(*((sum(v) / len(v), p, pc) for v, p, pc in acc["nearest"].values()))
            h, p, p_client = (torch.tensor(v, dtype=torch.float64) for v in (h, p, p_client))
            usable = (p > 0) & (p < 1)  # nan (no record of the class) compares False
            stats |= {
                "distinct_nearest": int(usable.sum()),
                "records_left_out": int((~usable).sum()),
                "closer_to_train": float(hits.mean()),
                "chance_client": float(p_client.mean()),
                "leakage_client": leakage_score(float(h.mean()), float(p_client.mean())),
                "dcr_train_median": float(torch.cat(acc["d_train"]).median()),
                "dcr_holdout_median": float(torch.cat(acc["d_hold"]).median()),
            }
            if usable.any():
                score, ci = leakage_interval(h[usable], p[usable], ctx.seed_int("leakage_bootstrap", i))
                stats |= {
                    "closer_to_train_distinct": float(h[usable].mean()),
                    "chance": float(p[usable].mean()),
                    "leakage": score,
                    "leakage_ci": ci,
                }
            score, member, strata = (torch.cat(v) for v in zip(*acc["mia"]))
            stats |= attack(score, member, strata, ctx.seed_int("membership_bootstrap", i))
        table[kind] = {"n": acc["n"], "bytes": acc["bytes"], "non_finite": acc["non_finite"], **stats}
    return table


def update_attack(algorithm, ctx, state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Loss-threshold membership inference on what the server receives: the clients sampled in one more round
    (round R + 1) run their method's own local update from the final global model ``state``; each client's model
    scores its training records (members) and held-out records by minus their cross-entropy, calibrated per (client,
    class) (``fed.membership.attack``). A client's state kept across rounds (control variates, previous models) is
    the audit's fresh one, not the run's. ``ctx``'s round and global model are left as they were."""
    before, weights = (ctx.round, ctx.global_state), {k: v.clone() for k, v in ctx.model.state_dict().items()}
    try:
        return _update_attack(algorithm, ctx, state)
    finally:  # the global model of another round than the audit's (ctx.global_model() rebuilds from these)
        ctx.round, ctx.global_state = before
        ctx.model.load_state_dict(weights)


def _update_attack(algorithm, ctx, state: dict[str, torch.Tensor]) -> dict[str, Any]:
    ctx.global_state, ctx.round = state, ctx.cfg.rounds + 1
    clients = algorithm.select_clients(ctx)
    scores, members, strata = [], [], []
    model = ctx.new_model()
    for k in clients:
        torch.manual_seed(ctx.seed_int("client", ctx.round, k))  # as rounds.run_round
        model.load_state_dict(algorithm.client_update(ctx, k).state)
        model.eval()
        if not len(ctx.test_idx[k]):
            continue
        records = torch.cat([ctx.train_idx[k].cpu(), ctx.test_idx[k].cpu()])
        x, y = ctx.samples(records)
        with torch.no_grad():
            batches = zip(x.split(512), y.split(512))
            loss = torch.cat([F.cross_entropy(model(b), t, reduction="none") for b, t in batches])
        scores.append(-loss.double().cpu())
        members.append(torch.arange(len(records)) < len(ctx.train_idx[k]))
        strata.append(k * ctx.num_classes + y.cpu())
    row: dict[str, Any] = {"n": len(clients), "bytes": len(clients) * sum(v.numel() * 4 for v in state.values())}
    if scores:
        row |= attack(torch.cat(scores), torch.cat(members), torch.cat(strata), ctx.seed_int("membership_updates"))
    return row


def invert(ctx, state: dict[str, torch.Tensor], seed: int, params: dict[str, Any] | None = None) -> Shared:
    """ZSDG's images of the model ``state`` (Fed-ZDA's generator; ``INVERSION`` unless ``params``)."""
    model = ctx.new_model()
    model.load_state_dict(state)
    model.eval()
    generator = torch.Generator().manual_seed(seed)  # ZSDG draws its starting noise on the CPU, on any device
    x, _, _ = zsdg(model, ctx.num_classes, ctx.input_shape, ZSDGConfig.from_params(params or INVERSION), generator)
    return Shared("model_inversion", -1, x.detach())


def reconstruct(algorithm, ctx, state: dict[str, torch.Tensor], seed: int, params: dict[str, Any]) -> Iterator[Shared]:
    """FLea's shared features of every client, through a decoder its attacker trains (``RECONSTRUCTION``)."""
    from fed.attacks import fit_decoder

    model = ctx.new_model()
    model.load_state_dict(state)
    model.eval()
    public = ctx.test_set.x[: params["samples"]].to(ctx.device)
    settings = {k: params[k] for k in ("lr", "optimizer", "kind")}
    decoder, _ = fit_decoder(model.features, public, params["epochs"], torch.Generator().manual_seed(seed), **settings)
    for k in range(ctx.num_clients):
        x, _ = ctx.client_data(k)
        picked = algorithm.shared_indices(ctx, k)
        if len(picked):
            with torch.no_grad():
                out = decoder(model.features(x[picked.to(x.device)]))
            yield Shared("reconstructed_features", k, out, members=ctx.train_idx[k][picked.to(ctx.train_idx[k].device)])


def audit(
    engine,
    state: dict[str, torch.Tensor],
    inversion: dict[str, Any] | None = None,
    reconstruction: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The leakage record of one finished cell: its method's shared artifacts (re-derived by its own ``setup`` —
    and FedDPMS' sharing step from Stage I's model — with the run's seeds; FLea's features through its attacker's
    decoder, ``reconstruction``, default ``RECONSTRUCTION``) and the inversion of its final model ``state`` (ZSDG
    with ``inversion``, default ``INVERSION``); plus the bytes of one model and of each ledger item."""
    algorithm, ctx = engine.algorithm, engine.ctx
    algorithm.setup(ctx)
    if algorithm.name == "feddpms":  # Stage II's sharing, from the model Stage I ended with (round P)
        if "warm" in ctx.stages:
            ckpt = checkpoint.load_file(ctx.stages["warm"], ctx.device, "Stage I")
            ctx.round, ctx.global_state = ckpt["round"] + 1, ckpt["global_state"]
        else:  # no shared Stage I (warm_start: false): the cell's own P rounds, again, with its seeds
            while ctx.round < algorithm.preliminary_rounds:
                run_round(ctx, algorithm)
            ctx.round += 1
        algorithm.share(ctx)
    items = list(shared_artifacts(algorithm, ctx))
    reconstruction = dict(reconstruction or RECONSTRUCTION)
    if algorithm.name == "flea":
        items += reconstruct(algorithm, ctx, state, ctx.seed_int("leakage_reconstruction"), reconstruction)
    inversion = dict(inversion or INVERSION)
    batchnorm = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in ctx.new_model().modules())
    if batchnorm:  # ZSDG matches BatchNorm statistics; a model without them is not inverted
        items.append(invert(ctx, state, ctx.seed_int("leakage"), inversion))
    artifacts = rates(items, ctx)
    artifacts["client_updates"] = update_attack(algorithm, ctx, state)  # last: it trains the clients once more
    return {
        "model_bytes": model_bytes(state),
        "item_bytes": item_bytes(algorithm, ctx),
        "artifacts": artifacts,
        "inversion": inversion,
        **({"reconstruction": reconstruction} if algorithm.name == "flea" else {}),
    }


def audit_cell(record: dict, model: str, data_root: str, partition: str, stages: dict, threads: int = 1) -> dict:
    """``audit`` of the cell a ``metrics.json`` record describes (its settings, its method with any tuned point, its
    seed), from its final model file; strict JSON (an undefined rate is null)."""
    from fed.config import FLConfig, MethodSpec
    from fed.reference import json_safe
    from fed.runner import make_engine

    method = record["method"]
    engine = make_engine(
        FLConfig(**record["config"]),
        MethodSpec(method["name"], method["algorithm"], method["params"]),
        record["dataset"],
        data_root,
        partition,
        record["seed"],
        threads,
        progress=None,
        stages=stages,
    )
    state = torch.load(model, map_location=engine.ctx.device, weights_only=True)
    if record.get("diverged_round") == 0:  # every tuning point diverged: no round ran, nothing left its clients
        return json_safe(nothing_left(engine, state))
    return json_safe(audit(engine, state))


def model_bytes(state: dict[str, torch.Tensor]) -> int:
    """Bytes of one model as it is exchanged (every parameter and buffer)."""
    return sum(v.numel() * v.element_size() for v in state.values())


def nothing_left(engine, state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The audit of a cell that trained no round (its method diverged at every tuning point, protocol 2.5): no
    artifact and no update left a client, so there is nothing to attack; the bytes are recorded as for any cell."""
    engine.algorithm.setup(engine.ctx)
    return {
        "model_bytes": model_bytes(state),
        "item_bytes": item_bytes(engine.algorithm, engine.ctx),
        "artifacts": {},
        "trained_no_round": True,
    }


def audit_files(
    metrics: str | Path,
    model: str | Path,
    data_root: str,
    partition: str,
    stages: dict,
    threads: int,
    benchmark: str | Path,
) -> dict:
    """``audit_cell`` of a finished cell's files, with the cost of its train job and of its stages' jobs (their
    benchmarks, ``fed.jobcost``: a stage's beside it, each where it exists) under ``jobs``: what rule audit and a
    campaign's audit job write to ``audit.json``."""
    from fed import jobcost

    record = audit_cell(json.loads(Path(metrics).read_text()), str(model), data_root, partition, stages, threads)
    jobs = {"train": jobcost.read(benchmark)} | {
        f"stage {name}: {Path(path).stem}": jobcost.read(Path(path).with_suffix(".benchmark.tsv"))
        for name, path in stages.items()
    }
    if jobs := {k: v for k, v in jobs.items() if v is not None}:
        record["jobs"] = jobs
    return record
