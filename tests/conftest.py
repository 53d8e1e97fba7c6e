import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import forked
import pytest

REPO = Path(__file__).resolve().parents[1]

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # each xdist worker trains on its share of the cores
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items):
    """With xdist (``-n auto --dist loadgroup``, the README's command) the tests that share the session's smoke run
    go to one worker, so it runs once; the rest of the suite runs beside it."""
    for item in items:
        if "smoke_run" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("smoke"))


@pytest.hookimpl(tryfirst=True)  # before the worker reports its tests
def pytest_collection_finish(session):
    """Say so where xdist did not group them (it appends ``@smoke`` to the test's id): the smoke run would run
    once per worker, unnoticed but for the time."""
    if getattr(session.config.option, "loadgroup", False):  # set on xdist workers
        ungrouped = [i.nodeid for i in session.items if "smoke_run" in i.fixturenames and "@smoke" not in i.nodeid]
        if ungrouped:
            message = f"xdist did not group the smoke tests ({ungrouped[0]}): needs pytest < 9.2"
            warnings.warn(pytest.PytestWarning(message), stacklevel=2)


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory):
    """A prepared synthetic dataset (generated, deterministic)."""
    from fed.data.datasets import prepare

    root = tmp_path_factory.mktemp("data")
    prepare("synthetic", root, synthetic={"n_train": 600, "n_test": 200})
    return root


@pytest.fixture
def accept_all(monkeypatch):
    """FedDPMS keeps every noisy mean: a few Stage I rounds decode poorly, and the tests using this are about the
    plumbing of Stage II (tests/test_feddpms.py, tests/test_gpu.py)."""
    import torch

    from fed.algorithms import feddpms
    from fed.dpms import noisy_mean_pool

    def pool(mean, std, label, accept, *args, **kwargs):
        keep = lambda v: torch.full((len(v),), label, device=v.device)  # noqa: E731
        return noisy_mean_pool(mean, std, label, keep, *args, **kwargs)

    monkeypatch.setattr(feddpms, "noisy_mean_pool", pool)


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """The smoke config run once through Snakemake (shared by the workflow and report tests)."""
    workdir = tmp_path_factory.mktemp("smoke")
    proc = snakemake(workdir, "--cores", "2", "--configfile", str(REPO / "config/smoke.yaml"))
    return workdir, proc


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the repository's workflow with ``workdir`` as its working directory; a dry run forks from a process that
    has imported PyTorch and Snakemake (``forked.py``), a run that trains starts afresh."""
    argv = ["-s", str(REPO / "Snakefile"), "-d", str(workdir), *map(str, args)]
    if {"-n", "--dry-run"} & set(args):
        proc = forked.run(argv, workdir)
    else:
        proc = subprocess.run([sys.executable, "-m", "snakemake", *argv], capture_output=True, text=True, cwd=workdir)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def write_yaml(path: Path, data: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(data))
    return path


__all__ = ["REPO", "snakemake", "write_yaml", "shutil"]
