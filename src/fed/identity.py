"""What determines a run's numbers: the code it executes (torch-free, so the workflow can import it).

``code_hash(module)`` hashes the source of the training path — the import closure of ``fed.runner``, which does not
follow the method registry ``fed.algorithms`` into the methods, nor into a stage kind that is one method's code
(``fed.runner.METHOD_STAGES``: DA-FL's GAN stage, ``fed.dpgan``) — together with the closure of one method's module.
Reporting, tracking and the command line are outside it: a figure edit changes no run's identity, and an edit to one
method changes the identity of its own cells and stages only. The workflow passes the hash as a param of the train
and stage rules (Snakemake reruns a job whose params changed); checkpoints and warm starts carry it (``fed.engine``).
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent
ENTRY = "fed.runner"  # what workflow/scripts/train.py and stage.py run
REGISTRY = "fed.algorithms"  # imports every method; a run executes only its own
PREFIX_MODULE = f"{REGISTRY}.fedavg"  # the method every FedAvg prefix stage runs
NOT_NUMERIC = frozenset({"fed.tracking", "fed.reference", "fed.provenance"})  # MLflow; metrics.json; where it ran


def runtime_imports(path: Path) -> set[str]:
    """``fed`` modules (and ``module.name`` candidates) a file imports at run time, at any depth; imports under
    ``if TYPE_CHECKING:`` do not count."""
    tree = ast.parse(path.read_text())
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fed"):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("fed")}
    return out


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__.py``)."""
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = path
    return out


@functools.cache
def import_graph() -> dict[str, frozenset[str]]:
    names = modules()
    return {m: frozenset(i for i in runtime_imports(p) if i in names and i != m) for m, p in names.items()}


def closure(start: str, skip: frozenset[str] = NOT_NUMERIC) -> set[str]:
    """``start`` and the modules it imports, transitively; the registry's methods and ``skip`` are not entered."""
    graph, seen, todo = import_graph(), set(), [start]
    while todo:
        m = todo.pop()
        if m in seen or m in skip:
            continue
        seen.add(m)
        todo += [n for n in graph[m] if not (m == REGISTRY and n.startswith(REGISTRY + "."))]
    return seen


@functools.cache
def algorithm_modules() -> dict[str, str]:
    """Config algorithm name → its module, read from the classes' ``name = "…"`` (no import of torch)."""
    out = {}
    for path in sorted((ROOT / "algorithms").glob("*.py")):
        for cls in ast.parse(path.read_text()).body:
            if not isinstance(cls, ast.ClassDef):
                continue
            for stmt in cls.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and [ast.unparse(t) for t in stmt.targets] == ["name"]
                    and isinstance(stmt.value, ast.Constant)
                ):
                    out[stmt.value.value] = f"{REGISTRY}.{path.stem}"
    return out


def _hash(members: set[str]) -> str:
    names, h = modules(), hashlib.sha256()
    for m in sorted(members):
        h.update(m.encode())
        h.update(names[m].read_bytes())
    return h.hexdigest()[:16]


@functools.cache
def code_hash(module: str = PREFIX_MODULE) -> str:
    """Content hash (path and bytes) of the training path's files and ``module``'s closure."""
    return _hash(closure(ENTRY) | closure(module))


@functools.cache
def module_hash(module: str) -> str:
    """Content hash of ``module``'s closure alone: the code of a part that runs without the FL engine (one client's
    GAN in DA-FL's stage, ``fed.dpgan.client_code``)."""
    return _hash(closure(module))


@functools.cache
def script_hash(script: Path, *loaded: str) -> str:
    """Content hash of the ``fed`` code a workflow script runs: the closures of the modules it imports and of
    ``loaded``, modules it loads by name (a figure's kind, ``fed.reporting.figure_kinds``), none left out (where a
    cell ran, say, is part of a table). The reporting rules pass it as a param, so an edit to the reporting code
    reruns the tables and figures that run it, and no training (``code_hash`` leaves reporting out)."""
    names = modules()
    imported = [m for m in runtime_imports(Path(script)) if m in names]
    return _hash(set().union(*(closure(m, frozenset()) for m in [*imported, *loaded])))


def algorithm_code_hash(algorithm: str) -> str:
    """``code_hash`` of the module that defines config algorithm ``algorithm`` (e.g. ``scaffold``)."""
    table = algorithm_modules()
    if algorithm not in table:
        raise ValueError(f"unknown algorithm {algorithm!r}; valid choices: {sorted(table)}")
    return code_hash(table[algorithm])
