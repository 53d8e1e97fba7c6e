"""Client partitions of a labelled training set.

Every scheme is a pure function ``(labels, num_clients, rng, **params) -> list of index arrays``; the public
entry point :func:`make_partition` seeds the RNG, adds the per-client local train/test split and returns a
JSON-serialisable record that the ``partition`` rule saves and every method of a cell then reuses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

PartitionFn = Callable[..., list[np.ndarray]]
PARTITIONS: dict[str, PartitionFn] = {}


def register(name: str) -> Callable[[PartitionFn], PartitionFn]:
    def deco(fn: PartitionFn) -> PartitionFn:
        PARTITIONS[name] = fn
        return fn

    return deco


@register("iid")
def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Uniformly random, equal-sized split (sizes differ by at most one)."""
    return [np.sort(part) for part in np.array_split(rng.permutation(len(labels)), num_clients)]


@register("unimodal")
def unimodal(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, shards_per_client: int = 2
) -> list[np.ndarray]:
    """McMahan et al. (2017) shards, each within one class: client k gets ``shards_per_client`` shards.

    Every class is cut into a number of shards proportional to its size (largest remainder), so a shard never
    crosses a class boundary and a client holds at most ``shards_per_client`` classes even when class sizes
    differ (MNIST: 5,421–6,742); shard sizes then differ by a few samples. With equal classes this is exactly
    McMahan's sort-and-cut. Shard contents depend only on the labels (stable order); the seed chooses which shards
    go to which client. Every sample is used.
    """
    num_shards = num_clients * shards_per_client
    classes, sizes = np.unique(labels, return_counts=True)
    per_class = _largest_remainder(sizes.astype(float), num_shards)
    if any(n > size for n, size in zip(per_class, sizes)):
        raise ValueError(f"unimodal: {len(labels)} samples cannot fill {num_shards} single-class shards")
    shards = [shard for c, n in zip(classes, per_class) for shard in np.array_split(np.flatnonzero(labels == c), n)]
    assignment = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return [np.sort(np.concatenate([shards[i] for i in row])) for row in assignment]


@register("multimodal")
def multimodal(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    shares: Sequence[float] = (0.50, 0.20, 0.15, 0.10, 0.05),
    classes_per_mode: int = 2,
    client_size: int | None = None,
    reuse: bool = False,
    permute_classes: bool = True,
) -> list[np.ndarray]:
    """Subpopulations of unequal prevalence (our reading of WAFFLe's multimodal non-IID, see docs/deviations.md).

    After a seeded permutation the classes are grouped into modes of ``classes_per_mode``; mode m is the data
    source of ``shares[m]`` of the clients, so each client owns at most ``classes_per_mode`` classes and the
    popular modes' classes dominate the client population. By default a mode's data are split equally among its
    clients, class by class, so the whole training set is used (clients of a rare mode hold more samples).
    ``client_size`` instead gives every client the same number of samples (both classes in equal parts), which
    leaves data unused and makes the classes imbalanced in aggregate as well (aggregate class counts proportional
    to ``shares``). ``reuse`` (with ``client_size``) draws each client's samples of a class independently of the
    other clients' (without replacement within a client), so clients of a popular mode may share samples and
    ``client_size`` is bounded by the class sizes only. ``permute_classes=False`` takes the modes in label order
    (classes 0-1 are the mode of ``shares[0]``, 2-3 of ``shares[1]``, …): the same modes for every seed.
    """
    classes = np.unique(labels)
    num_modes = len(classes) // classes_per_mode
    if len(shares) != num_modes:
        raise ValueError(f"multimodal: {len(shares)} shares given for {num_modes} modes of {classes_per_mode} classes")
    if reuse and client_size is None:
        raise ValueError("multimodal: reuse needs client_size (the default already uses every sample once)")
    ordered = rng.permutation(classes) if permute_classes else classes
    modes = ordered[: num_modes * classes_per_mode].reshape(num_modes, classes_per_mode)
    clients_per_mode = _largest_remainder(np.asarray(shares, dtype=float), num_clients)
    if client_size is not None:
        per_class = client_size // classes_per_mode
        cap = min(
            int((labels == c).sum()) // (1 if reuse else k)
            for mode, k in zip(modes, clients_per_mode)
            if k > 0
            for c in mode
        )
        if per_class > cap or per_class == 0:
            raise ValueError(
                f"multimodal: client_size {client_size} needs {per_class} samples per class but the data allow "
                f"{cap} " + ("per class" if reuse else "without reuse")
            )
    parts: list[np.ndarray] = []
    for mode, k in zip(modes, clients_per_mode):
        if k == 0:
            continue
        if reuse:  # each client draws its own per_class samples of every class of its mode
            members = [np.flatnonzero(labels == c) for c in mode]
            parts.extend(
                np.sort(np.concatenate([rng.choice(m, per_class, replace=False) for m in members])) for _ in range(k)
            )
            continue
        pools = [rng.permutation(np.flatnonzero(labels == c)) for c in mode]
        if client_size is not None:
            pools = [p[: k * per_class] for p in pools]
        splits = [np.array_split(p, k) for p in pools]
        parts.extend(np.sort(np.concatenate([s[j] for s in splits])) for j in range(k))
    order = rng.permutation(num_clients)  # clients of one mode are not neighbours in id order
    return [parts[i] for i in order]


@register("label_quantity")
def label_quantity(labels: np.ndarray, num_clients: int, rng: np.random.Generator, k: int = 2) -> list[np.ndarray]:
    """NIID-Bench ``noniid-#label k``: client i holds class ``i mod K`` plus k-1 other distinct random classes;
    each class is split equally among its holders (``array_split`` of a random permutation)."""
    classes = np.unique(labels)
    num_classes = len(classes)
    if not 1 <= k <= num_classes:
        raise ValueError(f"label_quantity: k={k} must be in [1, {num_classes}]")
    holders: dict[int, list[int]] = {int(c): [] for c in classes}
    for i in range(num_clients):
        own = i % num_classes
        others = rng.choice(np.delete(np.arange(num_classes), own), size=k - 1, replace=False)
        for c in (own, *others.tolist()):
            holders[int(classes[c])].append(i)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, owners in holders.items():
        if not owners:
            continue
        for owner, chunk in zip(owners, np.array_split(rng.permutation(np.flatnonzero(labels == c)), len(owners))):
            parts[owner].append(chunk)
    return [np.sort(np.concatenate(p)) if p else np.empty(0, dtype=np.int64) for p in parts]


@register("dirichlet")
def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    beta: float = 0.5,
    min_size: int = 10,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """NIID-Bench ``noniid-labeldir``: per class p ~ Dir(beta), with the balance mask (a client that already
    holds N/num_clients samples gets no more), redrawn until every client has at least ``min_size`` samples. A
    class whose whole draw falls on clients the mask has closed (a tiny beta puts it all on one) is drawn again."""
    if beta <= 0:
        raise ValueError(f"dirichlet: beta must be > 0, got {beta}")
    n = len(labels)
    for _ in range(max_tries):
        sizes = np.zeros(num_clients, dtype=np.int64)
        members, owners = [], []
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            p = rng.dirichlet(np.full(num_clients, beta))
            while not (p * (sizes < n / num_clients)).any():  # some client is open: fewer than n samples are dealt
                p = rng.dirichlet(np.full(num_clients, beta))
            p = p * (sizes < n / num_clients)
            p = p / p.sum()
            cuts = (np.cumsum(p) * len(idx)).astype(int)[:-1]
            counts = np.diff(np.concatenate([[0], cuts, [len(idx)]]))  # np.split(idx, cuts) chunk sizes
            members.append(idx)
            owners.append(np.repeat(np.arange(num_clients), counts))
            sizes += counts
        if sizes.min() >= min_size:
            members, owners = np.concatenate(members), np.concatenate(owners)
            order = np.lexsort((members, owners))  # by client, then by sample index
            return [part.astype(np.int64) for part in np.split(members[order], np.cumsum(sizes)[:-1])]
    raise ValueError(
        f"dirichlet: no draw gave every client >= {min_size} samples in {max_tries} tries (beta={beta} over "
        f"{num_clients} clients: the smaller beta, the fewer clients share a class); raise beta or lower min_size"
    )


class PartitionError(ValueError):
    """A partition file that a run cannot use: unreadable, or made for other settings."""


def read_partition(path: str | Path) -> dict:
    """A partition file as ``make_partition`` wrote it; one cut short (a copy, a full disk) is an error naming it and
    the fix."""
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PartitionError(
            f"partition file {path} is not valid JSON ({err}); delete it and rerun, Snakemake recomputes it"
        ) from None


def num_clients_for_avg_size(num_samples: int, avg_client_size: int) -> int:
    """Scarcity setting: as many clients as give an average local size of ``avg_client_size``."""
    return max(1, num_samples // avg_client_size)


def local_split(
    labels: np.ndarray, idx: np.ndarray, test_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Stratified split of one client's indices into local train and local test.

    Per class, ``round(test_fraction * n_c)`` samples go to test, but a class keeps at least one training sample.
    """
    train, test = [], []
    for c in np.unique(labels[idx]):
        members = rng.permutation(idx[labels[idx] == c])
        n_test = min(int(round(test_fraction * len(members))), len(members) - 1)
        test.append(members[:n_test])
        train.append(members[n_test:])
    if not train:
        return idx[:0], idx[:0]
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def validation_split(partition: dict, labels: Sequence[int] | np.ndarray, fraction: float, seed: int) -> dict:
    """The partition with a stratified ``fraction`` of every client's local *training* split moved to its local
    *test* split, which then holds only those samples: a run on it trains on the rest and its local-test metrics
    are validation metrics. Hyper-parameter selection (``tune:``) reads them; no test split is touched."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 11]))
    clients = []
    for c in partition["clients"]:
        train, val = local_split(labels, np.asarray(c["train"], dtype=np.int64), fraction, rng)
        clients.append({"train": train.tolist(), "test": val.tolist()})
    return {**partition, "clients": clients, "validation_fraction": fraction}


def make_partition(
    labels: Sequence[int] | np.ndarray,
    scheme: str,
    num_clients: int | None = None,
    seed: int = 0,
    local_test_fraction: float = 0.2,
    avg_client_size: int | None = None,
    **params,
) -> dict:
    """Partition ``labels`` with ``scheme`` and split every client locally; a pure function of its arguments.
    ``subsample`` (a fraction in (0, 1]) keeps that share of every client's samples, drawn without replacement after
    the assignment (FedDPMS' code: ``--mini``; our quick configs), from a stream of its own. ``group_clients`` (m)
    first cuts the data into g = ⌈num_clients/m⌉ class-balanced groups and partitions each over its share of the
    clients (FLea's code, m = 100: Dir(0.1) over 1,000 clients at once leaves some clients (almost) empty)."""
    if scheme not in PARTITIONS:
        raise ValueError(f"unknown partition scheme {scheme!r}; valid choices: {sorted(PARTITIONS)}")
    labels = np.asarray(labels)
    if avg_client_size is not None:
        num_clients = num_clients_for_avg_size(len(labels), avg_client_size)
    if not num_clients or num_clients < 1:
        raise ValueError("make_partition needs num_clients >= 1 or avg_client_size")
    # Independent streams: the assignment and the local splits do not perturb each other.
    assign_rng, split_rng, keep_rng = (np.random.default_rng(s) for s in np.random.SeedSequence([seed, 7]).spawn(3))
    subsample, group_clients = params.pop("subsample", None), params.pop("group_clients", None)
    if group_clients is None:
        parts = PARTITIONS[scheme](labels, num_clients, assign_rng, **params)
    else:
        parts = _grouped(labels, num_clients, group_clients, assign_rng, PARTITIONS[scheme], params)
        params["group_clients"] = group_clients
    if subsample is not None:
        if not 0 < subsample <= 1:
            raise ValueError(f"subsample must be in (0, 1], got {subsample}")
        parts = [np.sort(keep_rng.choice(idx, max(1, round(subsample * len(idx))), replace=False)) for idx in parts]
        params["subsample"] = subsample
    num_classes = int(labels.max()) + 1
    clients = []
    for idx in parts:
        train, test = local_split(labels, idx, local_test_fraction, split_rng)
        clients.append({"train": train.tolist(), "test": test.tolist()})
    counts = [
        np.bincount(labels[np.asarray(c["train"] + c["test"], dtype=np.int64)], minlength=num_classes).tolist()
        for c in clients
    ]
    return {
        "scheme": scheme,
        "params": params,
        "seed": seed,
        "num_clients": num_clients,
        "local_test_fraction": local_test_fraction,
        "num_classes": num_classes,
        "clients": clients,
        "counts": counts,
    }


def _grouped(labels: np.ndarray, num_clients: int, group_clients: int, rng: np.random.Generator, scheme, params: dict):
    """``scheme`` within each of ⌈num_clients / group_clients⌉ class-balanced slices of the data (every class's
    samples dealt into equal random parts), over an equal share of the clients each (sizes differ by at most one;
    a slice's data follow its client count); client ids run group by group."""
    if group_clients < 1:
        raise ValueError(f"group_clients must be >= 1, got {group_clients}")
    sizes = [len(c) for c in np.array_split(np.arange(num_clients), -(-num_clients // group_clients))]
    cuts = np.cumsum(sizes)[:-1] / num_clients
    slices: list[list[np.ndarray]] = [[] for _ in sizes]
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        for g, chunk in enumerate(np.split(members, (cuts * len(members)).astype(int))):
            slices[g].append(chunk)
    parts = []
    for members, k in zip(slices, sizes):
        idx = np.sort(np.concatenate(members))
        parts += [idx[p] for p in scheme(labels[idx], k, rng, **params)]
    return parts


def _largest_remainder(shares: np.ndarray, total: int) -> list[int]:
    """Integer counts proportional to ``shares`` that sum to ``total`` (Hamilton's method)."""
    raw = shares / shares.sum() * total
    counts = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - counts), kind="stable")[: total - counts.sum()]:
        counts[i] += 1
    return counts.tolist()


def write_partition(dataset: str, data_root: str | Path, spec: dict, preset: dict, seed: int, out: str | Path) -> Path:
    """The partition file of (preset, dataset, partition ``spec``, seed) as the ``partition`` rule writes it,
    atomically: a killed job never leaves a truncated partition behind."""
    from fed.config import for_dataset
    from fed.data.datasets import load_labels

    spec, preset = dict(spec), for_dataset(preset, dataset)
    part = make_partition(
        load_labels(dataset, data_root),
        spec.pop("scheme"),
        num_clients=preset.get("num_clients"),
        avg_client_size=preset.get("avg_client_size"),
        seed=seed,
        local_test_fraction=preset["local_test_fraction"],
        **spec,
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(part))
    tmp.replace(out)
    return out
