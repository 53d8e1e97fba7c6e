import gzip

import pytest
import torch

from fed.data.datasets import (
    DatasetUnavailableError,
    import_debian_fashion_mnist,
    load_dataset,
    make_synthetic,
    prepare,
)


def test_synthetic_is_deterministic_and_class_conditional():
    a, b = make_synthetic(n_train=200, n_test=50), make_synthetic(n_train=200, n_test=50)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert a["x_train"].shape == (200, 1, 28, 28) and a["x_train"].dtype == torch.uint8
    assert torch.bincount(a["y_train"]).tolist() == [20] * 10
    assert not torch.equal(make_synthetic(n_train=200, n_test=50, seed=1)["x_train"], a["x_train"])


def test_prepared_dataset_is_normalised(synthetic_root):
    ds = load_dataset("synthetic", synthetic_root, "train")
    assert ds.x.dtype == torch.float32 and len(ds) == 600 and ds.num_classes == 10


def test_missing_dataset_offline_says_what_to_put_where(tmp_path):
    with pytest.raises(DatasetUnavailableError) as err:
        prepare("mnist", tmp_path, download=False)
    msg = str(err.value)
    assert f"put MNIST/raw/{{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte.gz under {tmp_path.resolve()}/" in msg
    # with download: false torchvision reads only extracted files: the fix must say how the archives get extracted
    assert "(download: false)" in msg and "rerun with download: true" in msg
    with pytest.raises(DatasetUnavailableError, match="cifar-10-python.tar.gz"):
        prepare("cifar10", tmp_path, download=False)
    with pytest.raises(DatasetUnavailableError, match="run the prepare_data rule"):
        load_dataset("svhn", tmp_path, "train")


def test_unknown_dataset_lists_choices(tmp_path):
    with pytest.raises(ValueError, match="valid choices: \\['cifar10', 'cifar100', 'fmnist'"):
        prepare("imagenet", tmp_path)


def test_debian_fashion_mnist_import_feeds_torchvision(tmp_path):
    """Files in Debian's layout (gzipped idx) are unpacked where torchvision's FashionMNIST reads them."""
    src = tmp_path / "debian"
    src.mkdir()
    n = 7
    images = (
        bytes([0, 0, 8, 3, 0, 0, 0, n, 0, 0, 0, 28, 0, 0, 0, 28])
        + bytes(range(256)) * (n * 784 // 256)
        + bytes(n * 784 % 256)
    )
    labels = bytes([0, 0, 8, 1, 0, 0, 0, n]) + bytes([3, 1, 4, 1, 5, 9, 2])
    for split in ("train", "t10k"):
        (src / f"{split}-images-idx3-ubyte.gz").write_bytes(gzip.compress(images))
        (src / f"{split}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(labels))
    root = tmp_path / "data"
    assert import_debian_fashion_mnist(root, src)
    assert not import_debian_fashion_mnist(root, src)  # once
    import torchvision

    ds = torchvision.datasets.FashionMNIST(str(root), train=True, download=False)
    assert ds.targets.tolist() == [3, 1, 4, 1, 5, 9, 2] and ds.data.shape == (7, 28, 28)
