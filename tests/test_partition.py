import json

import numpy as np
import pytest

from fed.data.datasets import load_labels
from fed.data.partition import (
    PARTITIONS,
    PartitionError,
    _largest_remainder,
    dirichlet,
    local_split,
    make_partition,
    num_clients_for_avg_size,
    read_partition,
    validation_split,
    write_partition,
)

# 10 classes x 600 samples, shuffled: shard size (6000 / 40 = 150) divides every class
LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 600))
SCHEMES = {
    "iid": {},
    "unimodal": {"shards_per_client": 2},
    "multimodal": {"shares": [0.5, 0.2, 0.15, 0.1, 0.05]},
    "label_quantity": {"k": 2},
    "dirichlet": {"beta": 0.5, "min_size": 20},
}


def client_indices(part):
    return [np.asarray(c["train"] + c["test"], dtype=int) for c in part["clients"]]


def classes_of(part):
    return [set(LABELS[idx].tolist()) for idx in client_indices(part)]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_disjoint_and_deterministic(scheme):
    part = make_partition(LABELS, scheme, 20, seed=3, **SCHEMES[scheme])
    allidx = np.concatenate(client_indices(part))
    assert len(allidx) == len(set(allidx.tolist())), "a sample is given to two clients"
    assert part == make_partition(LABELS, scheme, 20, seed=3, **SCHEMES[scheme])
    assert part["clients"] != make_partition(LABELS, scheme, 20, seed=4, **SCHEMES[scheme])["clients"]
    assert sum(map(sum, part["counts"])) == len(allidx)


@pytest.mark.parametrize("scheme", ["iid", "unimodal", "multimodal", "label_quantity", "dirichlet"])
def test_complete(scheme):
    part = make_partition(LABELS, scheme, 20, seed=0, **SCHEMES[scheme])
    assert sorted(np.concatenate(client_indices(part)).tolist()) == list(range(len(LABELS)))


def test_unimodal_two_classes_per_client_and_equal_sizes():
    part = make_partition(LABELS, "unimodal", 20, seed=0)
    assert all(1 <= len(c) <= 2 for c in classes_of(part))
    assert {len(i) for i in client_indices(part)} == {300}


def mode_counts(classes):
    modes = {}
    for c in classes:
        modes[frozenset(c)] = modes.get(frozenset(c), 0) + 1
    return modes


def test_multimodal_uses_all_data_in_modes_of_unequal_prevalence():
    part = make_partition(LABELS, "multimodal", 20, seed=0, shares=[0.5, 0.2, 0.15, 0.1, 0.05])
    classes = classes_of(part)
    assert all(len(c) == 2 for c in classes)
    modes = mode_counts(classes)
    assert sorted(modes.values(), reverse=True) == [10, 4, 3, 2, 1]
    assert len(set().union(*modes)) == 10 and sum(len(m) for m in modes) == 10  # modes are disjoint pairs
    for mode, k in modes.items():  # a mode's 1,200 samples split equally among its k clients
        sizes = {len(idx) for idx, c in zip(client_indices(part), classes) if c == mode}
        assert sizes <= {2 * (600 // k), 2 * (600 // k + 1), 2 * (600 // k) + 1}, (k, sizes)
    assert np.asarray(part["counts"]).sum(0).tolist() == [600] * 10


def test_multimodal_equal_client_size_leaves_classes_imbalanced():
    part = make_partition(LABELS, "multimodal", 20, seed=0, shares=[0.5, 0.2, 0.15, 0.1, 0.05], client_size=120)
    assert {len(i) for i in client_indices(part)} == {120}
    for idx in client_indices(part):  # both classes of the mode in equal parts
        assert len(set(np.bincount(LABELS[idx])[np.bincount(LABELS[idx]) > 0].tolist())) == 1
    totals = np.asarray(part["counts"]).sum(0)
    assert totals.max() == 10 * 60 and totals.min() == 60


# MNIST's training-set class sizes (torchvision): unequal, so McMahan's plain sort-and-cut would cross classes
MNIST_CLASS_SIZES = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unimodal_shards_stay_within_classes_on_mnist_class_sizes(seed):
    labels = np.random.default_rng(seed).permutation(np.repeat(np.arange(10), MNIST_CLASS_SIZES))
    part = make_partition(labels, "unimodal", 100, seed=seed, shards_per_client=2)
    idx = [np.asarray(c["train"] + c["test"], dtype=int) for c in part["clients"]]
    assert max(len(set(labels[i].tolist())) for i in idx) <= 2
    assert sorted(np.concatenate(idx).tolist()) == list(range(60_000))  # every sample used
    assert all(570 <= len(i) <= 630 for i in idx)  # shards within 5 % of McMahan's 300


def test_multimodal_client_size_too_large_is_rejected():
    with pytest.raises(ValueError, match="without reuse"):
        make_partition(LABELS, "multimodal", 20, seed=0, client_size=10_000)


SHARES = [0.5, 0.2, 0.15, 0.1, 0.05]  # 20 clients: 10, 4, 3, 2, 1 per mode


def test_multimodal_reuse_gives_equal_clients_beyond_the_no_reuse_cap():
    # 300 per class: the 10-client mode needs 3,000 of a class's 600 samples, so clients must share samples
    part = make_partition(LABELS, "multimodal", 20, seed=0, shares=SHARES, client_size=600, reuse=True)
    idx = client_indices(part)
    assert {len(i) for i in idx} == {600}
    assert all(len(set(i.tolist())) == 600 for i in idx)  # no sample twice within a client
    for i in idx:  # two classes of 300
        assert sorted(np.bincount(LABELS[i], minlength=10).tolist()) == [0] * 8 + [300, 300]
    modes = mode_counts(classes_of(part))
    assert sorted(modes.values(), reverse=True) == [10, 4, 3, 2, 1]
    # aggregate class counts (with repeats) follow the shares: 300 x clients of the class's mode
    assert sorted(np.asarray(part["counts"]).sum(0).tolist()) == [300, 300, 600, 600, 900, 900, 1200, 1200, 3000, 3000]
    together = np.concatenate(idx)
    assert len(set(together.tolist())) < len(together)  # popular-mode clients share samples
    assert part == make_partition(LABELS, "multimodal", 20, seed=0, shares=SHARES, client_size=600, reuse=True)


def test_multimodal_reuse_validation():
    with pytest.raises(ValueError, match="without reuse"):  # 300 per class > 600 // 10 without reuse
        make_partition(LABELS, "multimodal", 20, seed=0, shares=SHARES, client_size=600)
    with pytest.raises(ValueError, match="allow 600 per class"):  # 700 per class > a class's 600 samples
        make_partition(LABELS, "multimodal", 20, seed=0, shares=SHARES, client_size=1400, reuse=True)
    with pytest.raises(ValueError, match="reuse needs client_size"):
        make_partition(LABELS, "multimodal", 20, seed=0, shares=SHARES, reuse=True)


@pytest.mark.parametrize("seed", [0, 1])
def test_multimodal_modes_in_label_order_without_permutation(seed):
    part = make_partition(LABELS, "multimodal", 20, seed=seed, shares=SHARES, permute_classes=False)
    modes = mode_counts(classes_of(part))
    assert modes == {
        frozenset({0, 1}): 10,
        frozenset({2, 3}): 4,
        frozenset({4, 5}): 3,
        frozenset({6, 7}): 2,
        frozenset({8, 9}): 1,
    }
    assert np.asarray(part["counts"]).sum(0).tolist() == [600] * 10  # still every sample once
    size = {frozenset({0, 1}): 120, frozenset({2, 3}): 300, frozenset({4, 5}): 400, frozenset({6, 7}): 600}
    size[frozenset({8, 9})] = 1200  # a mode's 1,200 samples over its k clients
    assert all(len(i) == size[frozenset(c)] for i, c in zip(client_indices(part), classes_of(part)))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_label_quantity_niid_bench_semantics(k):
    part = make_partition(LABELS, "label_quantity", 10, seed=1, k=k)
    for i, classes in enumerate(classes_of(part)):
        assert len(classes) == k and i % 10 in classes
    # each class is split equally among its holders
    counts = np.asarray(part["counts"])
    for c in range(10):
        held = counts[:, c][counts[:, c] > 0]
        assert held.max() - held.min() <= 1


def test_label_quantity_k_larger_than_classes():
    with pytest.raises(ValueError, match="k=11"):
        make_partition(LABELS, "label_quantity", 10, seed=0, k=11)


def test_dirichlet_min_size_and_skew():
    part = make_partition(LABELS, "dirichlet", 20, seed=0, beta=0.1, min_size=50)
    assert min(len(i) for i in client_indices(part)) >= 50
    props = np.asarray(part["counts"]) / np.asarray(part["counts"]).sum(1, keepdims=True)
    assert np.mean(props.max(1)) > 0.4  # beta=0.1: most of a client's data is one or two classes
    with pytest.raises(ValueError, match="beta must be > 0"):
        make_partition(LABELS, "dirichlet", 20, seed=0, beta=0.0)


def test_dirichlet_tiny_beta_gives_each_class_to_one_client():
    """β → 0 puts a class's whole draw on one client; where the balance mask had already closed that client, the
    draw was divided by zero (NumPy: "repeats may not contain negative values"). The class is drawn again instead,
    which changes no partition that could be made before (those draws never reached the division)."""
    part = make_partition(LABELS, "dirichlet", 10, seed=0, beta=1e-6)
    assert sorted(len(c) for c in classes_of(part)) == [1] * 10  # 600 samples close a client: one class each
    assert sorted(set.union(*classes_of(part))) == list(range(10))


def test_local_split_is_stratified_80_20():
    part = make_partition(LABELS, "unimodal", 20, seed=0, local_test_fraction=0.2)
    for c in part["clients"]:
        tr, te = np.asarray(c["train"]), np.asarray(c["test"])
        assert not set(tr.tolist()) & set(te.tolist())
        assert len(te) == 60 and len(tr) == 240
        for cls in set(LABELS[tr].tolist()):
            assert (LABELS[te] == cls).sum() == round(0.2 * (LABELS[np.r_[tr, te]] == cls).sum())


def test_scarcity_sets_number_of_clients():
    assert num_clients_for_avg_size(6000, 100) == 60
    part = make_partition(LABELS, "dirichlet", avg_client_size=300, seed=0, beta=1.0)
    assert part["num_clients"] == 20


def test_unknown_scheme_lists_choices():
    with pytest.raises(ValueError, match="valid choices: \\['dirichlet', 'iid'"):
        make_partition(LABELS, "shards", 10)
    assert set(SCHEMES) == set(PARTITIONS)


def test_subsample_keeps_a_share_of_every_client_and_leaves_the_rest_unchanged():
    labels = np.repeat(np.arange(10), 300)
    full = make_partition(labels, "dirichlet", 10, seed=3, beta=0.5)
    half = make_partition(labels, "dirichlet", 10, seed=3, beta=0.5, subsample=0.5)
    same = make_partition(labels, "dirichlet", 10, seed=3, beta=0.5, subsample=1.0)
    assert half["params"] == {"beta": 0.5, "subsample": 0.5}
    for f, h, s in zip(full["clients"], half["clients"], same["clients"]):
        whole, kept = set(f["train"]) | set(f["test"]), set(h["train"]) | set(h["test"])
        assert kept <= whole and len(kept) == max(1, round(0.5 * len(whole)))
        assert set(s["train"]) | set(s["test"]) == whole  # subsample 1.0: the same assignment
    with pytest.raises(ValueError, match="subsample"):
        make_partition(labels, "iid", 10, subsample=0.0)


def niid_bench_labeldir(labels, n_parties, beta, rng, min_require_size=10):
    """NIID-Bench's ``partition_data`` ("noniid-labeldir", utils.py), transcribed with ``np.random`` replaced by ``rng``
    (so both draw the same stream); it leaves each client's indices in dealing order, we compare them as sets."""
    N, K = len(labels), int(labels.max()) + 1
    min_size = 0
    while min_size < min_require_size:
        idx_batch = [[] for _ in range(n_parties)]
        for k in range(K):
            idx_k = np.where(labels == k)[0]
            rng.shuffle(idx_k)
            proportions = rng.dirichlet(np.repeat(beta, n_parties))
            proportions = np.array([p * (len(idx_j) < N / n_parties) for p, idx_j in zip(proportions, idx_batch)])
            proportions = proportions / proportions.sum()
            proportions = (np.cumsum(proportions) * len(idx_k)).astype(int)[:-1]
            idx_batch = [idx_j + idx.tolist() for idx_j, idx in zip(idx_batch, np.split(idx_k, proportions))]
            min_size = min([len(idx_j) for idx_j in idx_batch])
    return idx_batch


@pytest.mark.parametrize(("beta", "seed"), [(0.3, 0), (0.3, 1), (0.5, 2), (0.1, 3), (2.0, 4)])
def test_dirichlet_is_niid_bench_s_labeldir_loop(beta, seed):
    """Client by client the same samples as NIID-Bench's loop on the same stream: the balance mask against N / n,
    the cuts of the cumulative shares, and the redraws until every client holds ``min_size`` (unequal classes)."""
    labels = np.random.default_rng(9).permutation(np.repeat(np.arange(6), [90, 70, 60, 50, 40, 30]))
    ours = dirichlet(labels, 8, np.random.default_rng(seed), beta=beta, min_size=12)
    theirs = niid_bench_labeldir(labels, 8, beta, np.random.default_rng(seed), min_require_size=12)
    assert [sorted(t) for t in theirs] == [o.tolist() for o in ours]
    assert min(map(len, ours)) >= 12


def test_largest_remainder_by_hand():
    # 7 x (.5, .2, .15, .1, .05) = 3.5, 1.4, 1.05, .7, .35: floors 3 1 1 0 0, the two largest remainders .7 and .5
    assert _largest_remainder(np.array([0.5, 0.2, 0.15, 0.1, 0.05]), 7) == [4, 1, 1, 1, 0]
    assert _largest_remainder(np.array([3.0, 1.0]), 2) == [2, 0]  # 1.5, .5: the tie of remainders to the first
    # ties go to the earlier share, also beyond 16 items, where NumPy's default sort is not stable: 3 x (1/18 ... 2/18)
    # = 1/6 sixteen times and 1/3, all below 1, so the last and the first two get one each
    assert _largest_remainder(np.r_[np.ones(16), 2.0], 3) == [1, 1] + [0] * 14 + [1]


def test_local_split_keeps_a_training_sample_of_every_class():
    labels = np.array([0, 0, 1, 1, 1, 2])
    rng = np.random.default_rng(0)
    # half of each class: 1 of 2, round(1.5) = 2 of 3, and the single sample of class 2 stays in training
    train, test = local_split(labels, np.arange(6), 0.5, rng)
    assert np.bincount(labels[test], minlength=3).tolist() == [1, 2, 0]
    assert np.bincount(labels[train], minlength=3).tolist() == [1, 1, 1]
    train, test = local_split(labels, np.arange(6), 0.9, rng)  # round(.9 x 2) = 2 would leave class 0 no training
    assert np.bincount(labels[train], minlength=3).tolist() == [1, 1, 1]
    assert [a.tolist() for a in local_split(labels, np.arange(0), 0.5, rng)] == [[], []]


def test_the_streams_and_the_record():
    """The assignment, the local splits and the subsample draw from streams 0, 1 and 2 of SeedSequence([seed, 7]):
    a changed stream changes the data of every committed cell, so they are pinned here by their recipe."""
    labels = np.repeat(np.arange(3), 8)
    part = make_partition(labels, "iid", 4, seed=5, local_test_fraction=0.25)
    assign, split, _ = (np.random.default_rng(s) for s in np.random.SeedSequence([5, 7]).spawn(3))
    for idx, client in zip(np.array_split(assign.permutation(24), 4), part["clients"]):
        train, test = local_split(labels, np.sort(idx), 0.25, split)
        assert client == {"train": train.tolist(), "test": test.tolist()}
    assert part["params"] == {} and part["num_classes"] == 3 and part["num_clients"] == 4
    assert {k: part[k] for k in ("scheme", "seed", "local_test_fraction")} == {
        "scheme": "iid",
        "seed": 5,
        "local_test_fraction": 0.25,
    }
    counts = [np.bincount(labels[c["train"] + c["test"]], minlength=3).tolist() for c in part["clients"]]
    assert part["counts"] == counts
    # the defaults: seed 0, a fifth of each class for local test
    assert make_partition(labels, "iid", 4) == make_partition(labels, "iid", 4, seed=0, local_test_fraction=0.2)


def test_an_empty_client_is_recorded_with_zero_counts():
    labels = np.repeat(np.arange(4), 5)
    part = make_partition(labels, "dirichlet", 30, seed=0, beta=1.0, min_size=0)  # 20 samples over 30 clients
    empty = [i for i, c in enumerate(part["clients"]) if not c["train"] + c["test"]]
    assert empty and all(part["counts"][i] == [0, 0, 0, 0] for i in empty)


def test_number_of_clients_is_checked():
    labels = np.repeat(np.arange(2), 5)
    assert len(make_partition(labels, "iid", 1)["clients"]) == 1
    for bad in (0, -1, None):
        with pytest.raises(ValueError, match="^make_partition needs num_clients >= 1 or avg_client_size$"):
            make_partition(labels, "iid", bad)
    assert num_clients_for_avg_size(50, 100) == 1  # fewer samples than one client's average: one client


def test_subsample_keeps_at_least_one_sample_and_at_most_all():
    labels = np.repeat(np.arange(2), 3)
    part = make_partition(labels, "iid", 6, seed=0, subsample=0.1)  # one sample a client: round(0.1) = 0 -> 1
    assert [len(c["train"] + c["test"]) for c in part["clients"]] == [1] * 6
    with pytest.raises(ValueError, match="subsample must be in \\(0, 1\\], got 1.5"):
        make_partition(labels, "iid", 2, subsample=1.5)


def test_groups_of_clients_by_hand():
    """FLea's trick: ⌈7 / 4⌉ = 2 class-balanced slices for 4 and 3 clients (ids 0-3, then 4-6); each class's 14
    samples are cut at 4/7, so the first slice holds 8 of every class and the second 6, dealt within each slice."""
    labels = np.random.default_rng(1).permutation(np.repeat(np.arange(3), 14))
    part = make_partition(labels, "label_quantity", 7, seed=2, k=1, group_clients=4, local_test_fraction=0)
    assert part["params"] == {"k": 1, "group_clients": 4}
    idx = client_indices(part)
    first, second = np.concatenate(idx[:4]), np.concatenate(idx[4:])
    assert np.bincount(labels[first]).tolist() == [8, 8, 8] and np.bincount(labels[second]).tolist() == [6, 6, 6]
    # label_quantity within each slice: client i of a slice holds class i mod 3, split equally among its holders
    assert [set(labels[i].tolist()) for i in idx] == [{0}, {1}, {2}, {0}, {0}, {1}, {2}]
    assert [len(i) for i in idx] == [4, 8, 8, 4, 6, 6, 6]
    assert part == make_partition(labels, "label_quantity", 7, seed=2, k=1, group_clients=4, local_test_fraction=0)
    # three slices (⌈7 / 3⌉) of 3, 2 and 2 clients: cuts at 3/7 and 5/7 of each class, 6, 4 and 4 samples
    three = client_indices(make_partition(labels, "iid", 7, seed=2, group_clients=3, local_test_fraction=0))
    slices = [np.concatenate(three[a:b]) for a, b in ((0, 3), (3, 5), (5, 7))]
    assert [np.bincount(labels[s]).tolist() for s in slices] == [[6, 6, 6], [4, 4, 4], [4, 4, 4]]
    # a slice a client: cuts at ⌊14/3⌋ = 4 and ⌊28/3⌋ = 9
    one = make_partition(labels, "iid", 3, seed=2, group_clients=1, local_test_fraction=0)
    assert [np.bincount(labels[i]).tolist() for i in client_indices(one)] == [[4, 4, 4], [5, 5, 5], [5, 5, 5]]
    with pytest.raises(ValueError, match="group_clients must be >= 1, got 0"):
        make_partition(labels, "iid", 7, group_clients=0)


def test_validation_split_by_hand():
    labels = np.repeat(np.arange(2), 10)
    part = {"scheme": "iid", "clients": [{"train": list(range(0, 20, 2)), "test": [1, 3]}, {"train": [], "test": [5]}]}
    val = validation_split(part, labels, 0.4, seed=3)
    client, empty = val["clients"]
    assert empty == {"train": [], "test": []}  # a client with no training data has nothing to hold out
    # client 0's training split: 5 of class 0 (0-8) and 5 of class 1 (10-18); round(0.4 x 5) = 2 of each held out
    assert np.bincount(labels[client["test"]]).tolist() == [2, 2]
    assert sorted(client["train"] + client["test"]) == list(range(0, 20, 2))
    assert val["validation_fraction"] == 0.4 and val["scheme"] == "iid" and part["clients"][0]["test"] == [1, 3]
    rng = np.random.default_rng(np.random.SeedSequence([3, 11]))  # its own stream of the seed
    assert client["test"] == local_split(labels, np.arange(0, 20, 2), 0.4, rng)[1].tolist()


def test_write_and_read_a_partition(synthetic_root, tmp_path):
    labels = load_labels("synthetic", synthetic_root)
    preset = {"num_clients": {"synthetic": 3, "fmnist": 100}, "local_test_fraction": 0.25}  # per dataset
    spec = {"scheme": "dirichlet", "beta": 0.4}
    out = write_partition("synthetic", synthetic_root, spec, preset, 2, tmp_path / "new" / "dir" / "p.json")
    expected = make_partition(labels, "dirichlet", 3, 2, 0.25, beta=0.4)
    assert read_partition(out) == json.loads(json.dumps(expected)) and list(out.parent.iterdir()) == [out]
    assert spec == {"scheme": "dirichlet", "beta": 0.4}  # the caller's spec is left as it was
    scarce = {"avg_client_size": len(labels) // 4, "local_test_fraction": 0.25}  # scarcity: 4 clients
    assert read_partition(write_partition("synthetic", synthetic_root, spec, scarce, 2, out))["num_clients"] == 4
    out.write_text(out.read_text()[:50])  # cut short
    with pytest.raises(PartitionError, match=f"partition file {out} is not valid JSON.*delete it and rerun"):
        read_partition(out)


def test_unimodal_one_sample_shards_and_too_few_samples():
    labels = np.array([0, 0, 1, 1])
    part = make_partition(labels, "unimodal", 2, seed=0, local_test_fraction=0)  # 4 shards: one sample each
    counts = np.asarray(part["counts"])
    assert counts.sum(0).tolist() == [2, 2] and counts.sum(1).tolist() == [2, 2]
    with pytest.raises(ValueError, match="^unimodal: 3 samples cannot fill 4 single-class shards$"):
        make_partition(labels[:3], "unimodal", 2)


def test_multimodal_defaults_permute_the_classes_into_modes():
    part = make_partition(LABELS, "multimodal", 20, seed=0)
    explicit = make_partition(LABELS, "multimodal", 20, seed=0, shares=SHARES, permute_classes=True)
    assert part["clients"] == explicit["clients"]
    assert set(mode_counts(classes_of(part))) != {frozenset({2 * m, 2 * m + 1}) for m in range(5)}


def test_multimodal_modes_without_clients():
    """A mode whose share rounds to no client is skipped, also between modes that have clients, and is not asked to
    supply ``client_size``; a mode's cap counts its own clients, one client included."""
    labels = np.repeat(np.arange(6), [40, 40, 40, 40, 6, 40])
    kw = {"shares": [0.5, 0.0, 0.5], "permute_classes": False, "local_test_fraction": 0}
    part = make_partition(labels, "multimodal", 4, seed=0, **kw)  # 2, 0 and 2 clients
    assert mode_counts([set(labels[i].tolist()) for i in client_indices(part)]) == {
        frozenset({0, 1}): 2,
        frozenset({4, 5}): 2,
    }
    one = make_partition(labels, "multimodal", 2, seed=0, client_size=10, **kw)  # 1, 0 and 1 client
    assert sorted(len(i) for i in client_indices(one)) == [10, 10]
    with pytest.raises(ValueError, match="^multimodal: client_size 14 needs 7 samples per class but the data allow 6 "):
        make_partition(labels, "multimodal", 2, seed=0, client_size=14, **kw)
    assert [len(i) for i in client_indices(make_partition(labels, "multimodal", 4, client_size=2, **kw))] == [2] * 4
    with pytest.raises(ValueError, match="needs 0 samples per class"):  # one sample cannot be cut into 2 classes
        make_partition(labels, "multimodal", 4, client_size=1, **kw)


def test_multimodal_errors_name_the_mistake():
    with pytest.raises(ValueError, match="^multimodal: 2 shares given for 5 modes of 2 classes$"):
        make_partition(LABELS, "multimodal", 20, shares=[0.5, 0.5])
    with pytest.raises(ValueError, match="^multimodal: reuse needs client_size \\(the default already"):
        make_partition(LABELS, "multimodal", 20, shares=SHARES, reuse=True)
    with pytest.raises(ValueError, match="but the data allow 60 without reuse$"):  # 600 // 10 clients of a mode
        make_partition(LABELS, "multimodal", 20, seed=0, shares=SHARES, client_size=600)


def test_label_quantity_every_class_and_the_default_two():
    part = make_partition(LABELS, "label_quantity", 10, seed=1, k=10)  # k = K: every client holds every class
    assert np.asarray(part["counts"]).tolist() == [[60] * 10] * 10
    default = make_partition(LABELS, "label_quantity", 10, seed=1)
    assert default["clients"] == make_partition(LABELS, "label_quantity", 10, seed=1, k=2)["clients"]
    for seed in range(3):  # 3 clients of 10 classes: unheld classes between held ones are skipped, not the end
        few = make_partition(LABELS, "label_quantity", 3, seed=seed, k=3)
        assert all(len(classes) == 3 for classes in classes_of(few))
        held = {c for classes in classes_of(few) for c in classes}
        assert np.asarray(few["counts"]).sum(0).tolist() == [600 if c in held else 0 for c in range(10)]


class DrawnShares:
    """A generator whose Dirichlet draws are given in advance (and whose permutations keep the order), so that a
    partition can be computed by hand on any CPU."""

    def __init__(self, *shares):
        self.shares = list(shares)

    def permutation(self, x):
        return np.asarray(x).copy()

    def dirichlet(self, alpha):
        return np.asarray(self.shares.pop(0), dtype=float)


def test_dirichlet_defaults_and_the_exact_balance_mask():
    labels = np.repeat(np.arange(4), 30)
    default = dirichlet(labels, 4, np.random.default_rng(4))
    assert [d.tolist() for d in default] == [
        d.tolist() for d in dirichlet(labels, 4, np.random.default_rng(4), beta=0.5, min_size=10, max_tries=1000)
    ]
    # two classes of 10 over 2 clients, halved: 10 samples each, NIID-Bench's minimum (10) accepts them at once
    halves = dirichlet(np.repeat([0, 1], 10), 2, DrawnShares([0.5, 0.5], [0.5, 0.5]))
    assert [h.tolist() for h in halves] == [[0, 1, 2, 3, 4, 10, 11, 12, 13, 14], [5, 6, 7, 8, 9, 15, 16, 17, 18, 19]]
    # classes of 5, 5 and 10 over 2 clients (N / n = 10): client 1 draws all of classes 0 and 1, holds exactly 10
    # and is closed, so class 2's shares (0.3, 0.7) become (1, 0): all 10 to client 0 (open: 3 and 7)
    drawn = DrawnShares([0.0, 1.0], [0.0, 1.0], [0.3, 0.7])
    closed = dirichlet(np.repeat(np.arange(3), [5, 5, 10]), 2, drawn, min_size=0)
    assert [c.tolist() for c in closed] == [list(range(10, 20)), list(range(10))]
    # β → 0 puts a class on one open client; a client holding exactly N / n = 600 samples is closed, so with no
    # minimum size each of the 10 classes still lands on its own client
    for seed in range(3):
        part = make_partition(LABELS, "dirichlet", 10, seed=seed, beta=1e-6, min_size=0)
        assert sorted(len(c) for c in classes_of(part)) == [1] * 10
    with pytest.raises(
        ValueError, match="^dirichlet: no draw gave every client >= 41 samples in 1000 tries \\(beta=0.5"
    ):
        make_partition(labels, "dirichlet", 3, beta=0.5, min_size=41)  # 120 samples cannot give 3 x 41
