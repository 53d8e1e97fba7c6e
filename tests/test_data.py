import gzip

import numpy as np
import pytest
import torch

from fed.data.datasets import (
    DatasetUnavailableError,
    import_debian_fashion_mnist,
    load_dataset,
    load_labels,
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


def test_ucihar_reads_the_body_acceleration_windows_of_the_official_split(tmp_path):
    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("test", 5)):
        base = tmp_path / "UCI HAR Dataset" / split
        (base / "Inertial Signals").mkdir(parents=True)
        for axis, scale in zip("xyz", (1.0, 2.0, 3.0)):
            np.savetxt(base / "Inertial Signals" / f"body_acc_{axis}_{split}.txt", scale * rng.normal(size=(n, 128)))
            np.savetxt(base / "Inertial Signals" / f"total_acc_{axis}_{split}.txt", 100 + rng.normal(size=(n, 128)))
        np.savetxt(base / f"y_{split}.txt", np.arange(n) % 6 + 1, fmt="%d")
    prepare("ucihar", tmp_path, download=False)
    train, test = load_dataset("ucihar", tmp_path, "train"), load_dataset("ucihar", tmp_path, "test")
    assert train.x.shape == (12, 1, 128, 3) and test.x.shape == (5, 1, 128, 3)
    assert train.y.tolist() == [i % 6 for i in range(12)] and train.num_classes == 6  # 1..6 → 0..5
    assert abs(float(train.x.mean())) < 1e-5 and float(train.x.std()) == pytest.approx(1.0, abs=1e-2)
    raw = np.loadtxt(tmp_path / "UCI HAR Dataset/test/Inertial Signals/body_acc_z_test.txt", dtype=np.float32)
    assert np.corrcoef(raw.ravel(), test.x[:, 0, :, 2].numpy().ravel())[0, 1] > 0.999  # z is the last column


def test_urbansound8k_log_mel_features_and_the_held_out_fifth(tmp_path):
    from scipy.io import wavfile

    base = tmp_path / "UrbanSound8K"
    rows = ["slice_file_name,fsID,start,end,salience,fold,classID,class"]
    t = np.arange(22050 * 2) / 22050
    for i in range(10):
        fold = base / "audio" / f"fold{i % 3 + 1}"
        fold.mkdir(parents=True, exist_ok=True)
        tone = (0.3 * np.sin(2 * np.pi * (200 + 150 * i) * t)).astype(np.float32)  # mono, 2 s, 22.05 kHz
        wavfile.write(fold / f"{i}.wav", 22050, tone)
        rows.append(f"{i}.wav,{i},0,2,1,{i % 3 + 1},{i},class{i}")
    (base / "metadata").mkdir()
    (base / "metadata/UrbanSound8K.csv").write_text("\n".join(rows) + "\n")
    prepare("urbansound8k", tmp_path, download=False)
    train, test = load_dataset("urbansound8k", tmp_path, "train"), load_dataset("urbansound8k", tmp_path, "test")
    assert train.x.shape == (8, 2, 64, 344) and test.x.shape == (2, 2, 64, 344)  # FLea's Table 2 input; 20 % test
    assert sorted(train.y.tolist() + test.y.tolist()) == list(range(10))
    # mono duplicated into two channels: exactly in the features (one transform, copied); after standardisation with
    # each channel's own statistics, to rounding (two reductions over the same values may round differently)
    spec = torch.load(tmp_path / "urbansound8k/tensors.pt", weights_only=True)
    assert torch.equal(spec["x_train"][:, 0], spec["x_train"][:, 1])
    assert torch.allclose(train.x[:, 0], train.x[:, 1], rtol=0, atol=1e-5)
    # a higher tone puts its energy in higher mel bands; the padded second half is silence (the floor)
    peak = spec["x_train"][:, 0, :, :100].float().mean(-1).argmax(-1)
    assert (peak[spec["y_train"].argsort()].diff() >= 0).all()
    assert float(spec["x_train"][:, 0, :, 300:].float().max()) == pytest.approx(-80.0)


def test_flea_datasets_offline_name_the_files_and_the_archive(tmp_path):
    for name, words in (("ucihar", "Inertial Signals"), ("urbansound8k", "UrbanSound8K/metadata/UrbanSound8K.csv")):
        with pytest.raises(DatasetUnavailableError) as err:
            prepare(name, tmp_path, download=False)
        assert words in str(err.value) and "https://" in str(err.value) and str(tmp_path) in str(err.value)


def test_stand_ins_have_the_flea_input_shapes(tmp_path):
    for name, shape, classes in (("synthetic_har", (1, 128, 3), 6), ("synthetic_audio", (2, 64, 344), 10)):
        prepare(name, tmp_path, synthetic={"n_train": 24, "n_test": 6})
        data = load_dataset(name, tmp_path, "train")
        assert tuple(data.x.shape[1:]) == shape and int(data.y.max()) == classes - 1


def test_a_truncated_dataset_file_names_it_and_the_fix(tmp_path):
    """A tensors.pt cut short (a full disk, an interrupted copy) was a bare ``OSError: [Errno 22]`` from torch."""
    import re

    path = prepare("synthetic", tmp_path, synthetic={"n_train": 100, "n_test": 20})
    path.write_bytes(path.read_bytes()[:1000])
    fix = "delete it and rerun: Snakemake's prepare_data rule writes it again"
    for load in (lambda: load_dataset("synthetic", tmp_path, "train"), lambda: load_labels("synthetic", tmp_path)):
        with pytest.raises(DatasetUnavailableError, match=rf"{re.escape(str(path))} is unreadable .*; {fix}"):
            load()
