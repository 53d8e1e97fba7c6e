import numpy as np
import pytest

from fed.data.partition import PARTITIONS, make_partition, num_clients_for_avg_size

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
