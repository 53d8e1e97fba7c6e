"""Snakemake dry runs forked from a process that has imported PyTorch and Snakemake once.

A dry run spends ≈ 5 of its 7–10 s importing torch (the Snakefile's grid builds each method's algorithm) and
Snakemake's CLI; the suite makes ~50 of them. Each run here is a fresh fork of a server that imported only third-party
modules, never ``fed`` (a test may run the Snakefile of a copied, edited checkout), with the caller's working
directory, environment and arguments, and its output in files as a subprocess's would be.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PRELOAD = ["torch", "pandas", "numpy", "yaml", "snakemake.cli", "snakemake.api", "snakemake.workflow", "snakemake.dag"]
_context = None


def _main(argv: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """The child: ``python -m snakemake <argv>`` in ``cwd`` with ``env``, stdout and stderr into files."""
    from snakemake.workflow import Workflow

    os.chdir(cwd)
    Workflow._rundir = cwd  # read from the working directory when Snakemake is imported
    os.environ.clear()
    os.environ.update(env)
    sys.path[0:0] = [""]  # ``python -m`` puts the working directory first
    sys.argv = ["snakemake", *argv]
    for fd, path in ((1, out), (2, err)):
        file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(file, fd)
        os.close(file)
    from snakemake.cli import main

    try:
        main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m snakemake <argv>`` run in ``cwd``, forked from the preloaded server (started on first use)."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        child = _context.Process(target=_main, args=(argv, str(cwd), dict(os.environ), str(out), str(err)))
        child.start()
        child.join()
        return subprocess.CompletedProcess(
            ["snakemake", *argv], child.exitcode, out.read_text(errors="replace"), err.read_text(errors="replace")
        )
