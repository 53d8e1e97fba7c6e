"""FLea's non-image datasets, read from their official archives into float arrays (cached by ``fed.data.datasets``).

- **UCI-HAR** (Anguita et al. 2013): 128-step windows of the body acceleration (x, y, z), as FLea's code feeds
  HARNet (the first 3 of the 9 inertial channels), shaped (1, 128, 3); 6 activities; the official train/test split
  (7,352 / 2,947 windows).
- **UrbanSound8K** (Salamon et al. 2014): every excerpt resampled to 44.1 kHz, two channels (mono duplicated),
  padded or cut to 4 s, log-mel spectrogram with 64 mels (n_fft 1024, hop 512) cut to 344 frames: (2, 64, 344) as
  in FLea's Table 2. librosa computes it (torchaudio does not match our torch). FLea holds out a random 20 % for
  testing, not an official fold: we draw it with a fixed seed (``URBANSOUND_SPLIT_SEED``).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import torch

UCIHAR_DIR = "UCI HAR Dataset"
UCIHAR_URL = "https://archive.ics.uci.edu/static/public/240/human+activity+recognition+using+smartphones.zip"
UCIHAR_CHANNELS = ("body_acc_x", "body_acc_y", "body_acc_z")
URBANSOUND_DIR = "UrbanSound8K"
URBANSOUND_URL = "https://zenodo.org/records/1203745/files/UrbanSound8K.tar.gz"
URBANSOUND_SPLIT_SEED = 0
SAMPLE_RATE, SECONDS, N_FFT, HOP, N_MELS, FRAMES = 44100, 4, 1024, 512, 64, 344


def ucihar_arrays(root: Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 1, 128, 3) float32 windows and 0-based labels of the official ``split`` ("train" or "test")."""
    base = root / UCIHAR_DIR / split
    signals = [np.loadtxt(base / "Inertial Signals" / f"{c}_{split}.txt", dtype=np.float32) for c in UCIHAR_CHANNELS]
    x = np.stack(signals, axis=-1)[:, None]  # (N, 1, 128, 3)
    y = np.loadtxt(base / f"y_{split}.txt", dtype=np.int64) - 1
    return torch.from_numpy(x), torch.from_numpy(y)


def ucihar_files(root: Path) -> list[Path]:
    return [
        root / UCIHAR_DIR / s / name
        for s in ("train", "test")
        for name in [f"y_{s}.txt", *(f"Inertial Signals/{c}_{s}.txt" for c in UCIHAR_CHANNELS)]
    ]


def log_mel(path: Path) -> np.ndarray:
    """The (2, 64, 344) log-mel spectrogram of one excerpt (dB relative to its maximum, floor −80 dB)."""
    import librosa

    audio, _ = librosa.load(path, sr=SAMPLE_RATE, mono=False)
    audio = librosa.util.fix_length(np.atleast_2d(audio)[:2], size=SAMPLE_RATE * SECONDS, axis=-1)
    mel = librosa.feature.melspectrogram(y=audio, sr=SAMPLE_RATE, n_fft=N_FFT, hop_length=HOP, n_mels=N_MELS)
    mel = np.repeat(mel, 2, axis=0) if len(mel) == 1 else mel  # mono: one transform, duplicated (exactly)
    db = librosa.power_to_db(mel, ref=np.max(mel) if mel.max() > 0 else 1.0, top_db=80.0)
    return db[:, :, :FRAMES].astype(np.float32)


def urbansound_arrays(root: Path) -> dict[str, torch.Tensor]:
    """Both splits: log-mel features (float16 in the cache, 8,732 × 2 × 64 × 344) and class ids."""
    base = root / URBANSOUND_DIR
    with open(base / "metadata" / "UrbanSound8K.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    x = np.stack([log_mel(base / "audio" / f"fold{r['fold']}" / r["slice_file_name"]) for r in rows])
    y = np.array([int(r["classID"]) for r in rows], dtype=np.int64)
    order = np.random.default_rng(URBANSOUND_SPLIT_SEED).permutation(len(y))
    n_test = int(round(0.2 * len(y)))
    test, train = np.sort(order[:n_test]), np.sort(order[n_test:])
    x16, labels = torch.from_numpy(x).to(torch.float16), torch.from_numpy(y)
    return {"x_train": x16[train], "y_train": labels[train], "x_test": x16[test], "y_test": labels[test]}


def urbansound_files(root: Path) -> list[Path]:
    return [root / URBANSOUND_DIR / "metadata" / "UrbanSound8K.csv", root / URBANSOUND_DIR / "audio"]


def download(name: str, root: Path) -> None:
    """Fetch and extract the official archive (torchvision's downloader); UCI's zip holds a second zip."""
    from torchvision.datasets.utils import download_and_extract_archive, extract_archive

    url = UCIHAR_URL if name == "ucihar" else URBANSOUND_URL
    download_and_extract_archive(url, str(root), filename=Path(url).name.replace("+", "_"))
    inner = root / f"{UCIHAR_DIR}.zip"
    if name == "ucihar" and inner.exists():
        extract_archive(str(inner), str(root))


READERS = {"ucihar": (ucihar_files, UCIHAR_URL), "urbansound8k": (urbansound_files, URBANSOUND_URL)}


def signal_arrays(name: str, root: Path, download_ok: bool) -> dict[str, torch.Tensor]:
    """Both splits of ``name`` as float tensors; downloads first when files are missing and ``download_ok``."""
    files, url = READERS[name]
    missing = [p for p in files(root) if not p.exists()]
    if missing and download_ok:
        try:
            download(name, root)
        except Exception as err:  # offline: URLError / OSError
            raise FileNotFoundError(f"download of {url} failed ({type(err).__name__}: {err})") from err
        missing = [p for p in files(root) if not p.exists()]
    if missing:
        raise FileNotFoundError(f"missing {', '.join(str(p) for p in missing[:3])}")
    if name == "ucihar":
        (x_tr, y_tr), (x_te, y_te) = ucihar_arrays(root, "train"), ucihar_arrays(root, "test")
        return {"x_train": x_tr, "y_train": y_tr, "x_test": x_te, "y_test": y_te}
    return urbansound_arrays(root)
