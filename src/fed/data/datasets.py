"""Datasets as in-memory tensors.

Real datasets come from torchvision (with its download path), from an offline data root, or — for
Fashion-MNIST — from Debian's ``dataset-fashion-mnist`` package, imported automatically. ``synthetic`` is a
deterministic class-conditional image dataset for tests. :func:`prepare` turns any of them into one cached
``uint8`` tensor file per dataset, which training jobs load in milliseconds.
"""

from __future__ import annotations

import gzip
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    tv_class: str | None  # torchvision.datasets class name; None for generated data
    channels: int
    size: int
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    files: str  # what to put where, for the offline error message (relative to the data root)
    n_train: int = 0  # size of the official training split (0: set by config, the synthetic set)
    width: int = 0  # input width where it differs from ``size`` (UCI-HAR windows: 128 × 3)
    reader: str | None = None  # "signals": FLea's audio/sensor data (fed.data.signals), cached as floats


DATASETS: dict[str, DatasetInfo] = {
    d.name: d
    for d in [
        DatasetInfo(
            "mnist",
            "MNIST",
            1,
            28,
            10,
            (0.1307,),
            (0.3081,),
            "MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz",
            60000,
        ),
        DatasetInfo(
            "fmnist",
            "FashionMNIST",
            1,
            28,
            10,
            (0.2860,),
            (0.3530,),
            "FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz "
            "(or: apt-get install dataset-fashion-mnist)",
            60000,
        ),
        DatasetInfo(
            "cifar10",
            "CIFAR10",
            3,
            32,
            10,
            (0.4914, 0.4822, 0.4465),
            (0.2470, 0.2435, 0.2616),
            "cifar-10-python.tar.gz (extracted: cifar-10-batches-py/)",
            50000,
        ),
        DatasetInfo(
            "cifar100",
            "CIFAR100",
            3,
            32,
            100,
            (0.5071, 0.4865, 0.4409),
            (0.2673, 0.2564, 0.2762),
            "cifar-100-python.tar.gz (extracted: cifar-100-python/)",
            50000,
        ),
        DatasetInfo(
            "svhn",
            "SVHN",
            3,
            32,
            10,
            (0.4377, 0.4438, 0.4728),
            (0.1980, 0.2010, 0.1970),
            "train_32x32.mat and test_32x32.mat",
            73257,
        ),
        # FLea's audio and sensor data: float features, standardised per channel with the training split's statistics
        DatasetInfo(
            "ucihar",
            None,
            1,
            128,
            6,
            (),
            (),
            "'UCI HAR Dataset/{train,test}/y_{split}.txt' and 'Inertial Signals/body_acc_{x,y,z}_{split}.txt' "
            "(human+activity+recognition+using+smartphones.zip, unzipped twice)",
            7352,
            width=3,
            reader="signals",
        ),
        DatasetInfo(
            "urbansound8k",
            None,
            2,
            64,
            10,
            (),
            (),
            "UrbanSound8K/metadata/UrbanSound8K.csv and UrbanSound8K/audio/fold1..fold10/*.wav (UrbanSound8K.tar.gz, "
            "extracted; features need `pip install librosa`)",
            6986,
            width=344,
            reader="signals",
        ),
        DatasetInfo("synthetic", None, 1, 28, 10, (0.5,), (0.25,), "(generated, nothing to download)"),
        # generated stand-ins of FLea's input shapes, for tests and smoke runs
        DatasetInfo("synthetic_har", None, 1, 128, 6, (0.5,), (0.25,), "(generated, nothing to download)", width=3),
        DatasetInfo(
            "synthetic_audio", None, 2, 64, 10, (0.5, 0.5), (0.25, 0.25), "(generated, nothing to download)", width=344
        ),
    ]
}


class DatasetUnavailableError(RuntimeError):
    """A dataset is neither cached, nor importable offline, nor downloadable."""


@dataclass
class TensorDataset:
    """Normalised float images (N, C, H, W) and int64 labels, all in memory."""

    x: torch.Tensor
    y: torch.Tensor
    num_classes: int

    def __len__(self) -> int:
        return len(self.y)


def info(name: str) -> DatasetInfo:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid choices: {sorted(DATASETS)}")
    return DATASETS[name]


def cache_path(root: str | Path, name: str) -> Path:
    return Path(root) / name / "tensors.pt"


def prepare(name: str, root: str | Path, download: bool = True, synthetic: dict | None = None) -> Path:
    """Write ``<root>/<name>/tensors.pt`` (uint8 images, int64 labels, train and test) and return its path."""
    meta = info(name)
    out = cache_path(root, name)
    out.parent.mkdir(parents=True, exist_ok=True)
    if meta.reader == "signals":
        arrays = _signal_arrays(meta, Path(root), download)
    elif meta.tv_class is None:
        shape = {"channels": meta.channels, "size": meta.size, "width": meta.width or meta.size}
        arrays = make_synthetic(**{**shape, "num_classes": meta.num_classes, **(synthetic or {})})
    else:
        arrays = {split: _torchvision_arrays(meta, Path(root), split, download) for split in ("train", "test")}
        arrays = {f"{k}_{split}": v for split, pair in arrays.items() for k, v in zip(("x", "y"), pair)}
    tmp = out.with_suffix(".tmp")
    torch.save(arrays, tmp)
    tmp.replace(out)
    return out


def load_cache(name: str, root: str | Path) -> dict[str, torch.Tensor]:
    """The tensors ``prepare`` wrote; a missing or unreadable file is an error naming it and the fix."""
    path = cache_path(root, name)
    if not path.exists():
        raise DatasetUnavailableError(f"{name} is not prepared: {path} is missing (run the prepare_data rule)")
    try:
        return torch.load(path, weights_only=True)
    except Exception as err:
        raise DatasetUnavailableError(cache_unreadable(name, root, f"{type(err).__name__}: {err}")) from None


def cache_unreadable(name: str, root: str | Path, why: str) -> str:
    """The error of a prepared dataset that cannot be read, with the fix (the raw downloads stay where they are)."""
    return (
        f"{cache_path(root, name)} is unreadable ({why}); delete it and rerun: Snakemake's prepare_data rule writes "
        "it again (without Snakemake: fed prepare)"
    )


def cache_error(name: str, root: str | Path) -> str | None:
    """Why a prepared dataset that exists cannot be read, cheaply: a file cut short (a copy, a full disk) lacks the
    end of its zip archive (``torch.save``'s format). None for a complete or missing one."""
    path = cache_path(root, name)
    if path.exists() and not zipfile.is_zipfile(path):
        return cache_unreadable(name, root, "not a complete torch.save archive: cut short?")
    return None


def load_dataset(name: str, root: str | Path, split: str, device: str | torch.device = "cpu") -> TensorDataset:
    """Load a prepared dataset split as normalised float tensors."""
    meta = info(name)
    arrays = load_cache(name, root)
    raw = arrays[f"x_{split}"]
    x = raw.to(device=device, dtype=torch.float32)
    if raw.dtype == torch.uint8:  # images: the dataset's published channel statistics
        x = x.div_(255.0)
        mean = torch.tensor(meta.mean, device=device).view(1, -1, 1, 1)
        std = torch.tensor(meta.std, device=device).view(1, -1, 1, 1)
    else:  # float features (FLea's audio, sensors): standardised with the training split's channel statistics
        train = arrays["x_train"].to(torch.float32)
        mean = train.mean((0, 2, 3)).view(1, -1, 1, 1).to(device)
        std = train.std((0, 2, 3)).clamp_min(1e-8).view(1, -1, 1, 1).to(device)
    return TensorDataset(
        x.sub_(mean).div_(std), arrays[f"y_{split}"].to(device), meta.num_classes
    )  # in place: no full-size copies


def load_labels(name: str, root: str | Path, split: str = "train") -> np.ndarray:
    return load_cache(name, root)[f"y_{split}"].numpy()


def make_synthetic(
    n_train: int = 2000,
    n_test: int = 500,
    num_classes: int = 10,
    size: int = 28,
    noise: float = 0.35,
    seed: int = 0,
    channels: int = 1,
    width: int | None = None,
) -> dict[str, torch.Tensor]:
    """Class-conditional images (channels × size × width): a fixed smooth random prototype per class plus
    per-sample noise and shift.

    Deterministic in ``seed``; learnable by the paper CNNs in a few rounds, and not trivially (noise, shifts).
    """
    width = width or size
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(num_classes, channels, 7, 7, generator=g)
    protos = torch.nn.functional.interpolate(coarse, size=(size, width), mode="bilinear", align_corners=False)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n) % num_classes
        y = y[torch.randperm(n, generator=g)]
        imgs = protos[y] + noise * torch.randn(n, channels, size, width, generator=g)
        shifts = torch.randint(-2, 3, (n, 2), generator=g)
        imgs = torch.stack([torch.roll(im, tuple(s.tolist()), dims=(1, 2)) for im, s in zip(imgs, shifts)])
        return (imgs.clamp(0, 1) * 255).round().to(torch.uint8), y.to(torch.int64)

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def _torchvision_arrays(meta: DatasetInfo, root: Path, split: str, download: bool) -> tuple[torch.Tensor, torch.Tensor]:
    import torchvision

    if meta.name == "fmnist":
        import_debian_fashion_mnist(root)
    cls = getattr(torchvision.datasets, meta.tv_class)
    kwargs = {"split": split} if meta.name == "svhn" else {"train": split == "train"}
    try:
        ds = cls(str(root), download=download, **kwargs)
    except Exception as err:  # torchvision raises RuntimeError (missing) or URLError/OSError (offline)
        # With download=False torchvision reads only extracted files; with download=True it extracts archives
        # that are already there without touching the network.
        how = (
            "then rerun"
            if download
            else (
                "then rerun with download: true (torchvision then extracts the archives without network access; with "
                "download: false it reads only already-extracted files)"
            )
        )
        fetch = (
            f'copy them from a machine with internet, where `python -c "import torchvision; torchvision.datasets.'
            f"{meta.tv_class}('{root}', download=True)\"` fetches them — {how}"
        )
        raise _unavailable(f"{meta.name!r} ({split})", meta, root, download, err, fetch) from err
    x = torch.as_tensor(np.asarray(ds.data))  # MNIST-like (N,H,W); CIFAR (N,H,W,C); SVHN (N,C,H,W)
    if x.ndim == 3:
        x = x.unsqueeze(1)
    elif meta.name != "svhn":
        x = x.permute(0, 3, 1, 2)
    labels = ds.labels if meta.name == "svhn" else ds.targets
    return x.contiguous().to(torch.uint8), torch.as_tensor(np.asarray(labels), dtype=torch.int64)


def _signal_arrays(meta: DatasetInfo, root: Path, download: bool) -> dict[str, torch.Tensor]:
    from fed.data.signals import READERS, signal_arrays

    try:
        return signal_arrays(meta.name, root, download)
    except (FileNotFoundError, ImportError) as err:
        fetch = f"download {READERS[meta.name][1]} on a machine with internet and extract it there — then rerun"
        raise _unavailable(repr(meta.name), meta, root, download, err, fetch) from err


def _unavailable(what: str, meta: DatasetInfo, root: Path, download: bool, err: Exception, fetch: str):
    """The offline error: what is missing where, why, which files to put there and how to get them."""
    return DatasetUnavailableError(
        f"dataset {what} is not under {root.resolve()}"
        + (" and could not be downloaded" if download else " (download: false)")
        + f" ({type(err).__name__}: {err}).\nFix: put {meta.files} under {root.resolve()}/ — e.g. {fetch}."
    )


def import_debian_fashion_mnist(root: Path, source: Path = DEBIAN_FASHION_MNIST) -> bool:
    """Unpack Debian's ``dataset-fashion-mnist`` files into torchvision's raw layout, once. True if imported."""
    raw = root / "FashionMNIST" / "raw"
    names = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    if all((raw / n).exists() for n in names) or not all((source / f"{n}.gz").exists() for n in names):
        return False
    raw.mkdir(parents=True, exist_ok=True)
    for n in names:
        with gzip.open(source / f"{n}.gz", "rb") as src, open(raw / n, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return True
