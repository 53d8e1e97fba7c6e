"""The package's shape: Fed-ZDA numbers unchanged by the issue-7 refactor, no import cycles, algorithms never see
the engine."""

import json
import runpy
import subprocess
import sys

import pytest
import torch
from conftest import REPO

from fed.identity import import_graph


def test_fedzda_smoke_cells_identical_to_before_the_refactor(tmp_path, monkeypatch):
    """tests/data/golden_fedzda_smoke.json holds six Fed-ZDA smoke cells of the engine before the issue-7 refactor,
    in float64 (tests/data/make_golden.py says how it was written): there the kernel set of the CPU moves nothing
    that matters (5e-15 relative between `ATEN_CPU_CAPABILITY=default` and `=avx2`), while today's code differs from
    the old one by ≤ 9.6e-8 (operation order) and a changed update by far more than the 1e-6 allowed."""
    golden = json.loads((REPO / "tests/data/golden_fedzda_smoke.json").read_text())
    monkeypatch.setattr(sys, "argv", ["make_golden.py", str(tmp_path / "now.json")])
    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    try:
        runpy.run_path(str(REPO / "tests/data/make_golden.py"), run_name="__main__")
    finally:
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
    now = json.loads((tmp_path / "now.json").read_text())
    assert set(now) == set(golden) == {"fedavg", "fedprox", "qffl", "centralized", "fedzdac", "fedzdas"}
    for method, record in golden.items():
        for old, new in zip(record["history"], now[method]["history"], strict=True):
            for key, value in old.items():
                assert new[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (method, old["round"], key)


def module_graph() -> dict[str, set[str]]:
    """fed module → the fed modules it imports at run time (``fed.identity``'s reading of the source)."""
    return {m: set(deps) for m, deps in import_graph().items()}


def test_no_import_cycle_in_fed():
    graph = module_graph()
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for n in graph[m]:
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(n) :] + [n]))
            if n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])


def test_algorithms_see_a_context_never_the_engine():
    graph = module_graph()
    for m, deps in graph.items():
        if m.startswith("fed.algorithms"):
            assert not deps & {"fed.engine", "fed.runner", "fed.rounds"}, (m, deps)
    assert "fed.algorithms" not in graph["fed.config"]


def test_importing_the_registries_leaves_logging_alone_and_a_training_job_starts_light():
    """The workflow imports fed's registries; a library that configures the root logger on import (Opacus does)
    would print every Snakemake log line twice, so such imports stay inside the functions that need them. The
    training path (workflow/scripts/train.py's imports) loads neither torchvision (models, ops, torch._dynamo: ~2 s
    of every job's start) nor pandas: only the code that uses them (torchvision's models, tables, figures) does.
    (MLflow imports pandas when a tracked run starts; an untracked ``fed run`` never loads it.)"""
    code = (
        "import logging, sys, fed.config, fed.runner, fed.tracking;"
        "job = [m in sys.modules for m in ('torchvision', 'pandas')];"
        "import fed.algorithms, fed.validate;"
        "print(len(logging.getLogger().handlers), *job)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0", "False", "False"]
