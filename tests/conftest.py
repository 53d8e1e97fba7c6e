import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory):
    """A prepared synthetic dataset (generated, deterministic)."""
    from fed.data.datasets import prepare

    root = tmp_path_factory.mktemp("data")
    prepare("synthetic", root, synthetic={"n_train": 600, "n_test": 200})
    return root


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """The smoke config run once through Snakemake (shared by the workflow and report tests)."""
    workdir = tmp_path_factory.mktemp("smoke")
    proc = snakemake(workdir, "--cores", "2", "--configfile", str(REPO / "config/smoke.yaml"))
    return workdir, proc


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the repository's workflow with ``workdir`` as its working directory."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def write_yaml(path: Path, data: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(data))
    return path


__all__ = ["REPO", "snakemake", "write_yaml", "shutil"]
