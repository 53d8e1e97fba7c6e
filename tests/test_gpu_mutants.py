"""scripts/gpu_mutants.py keeps up with the code: each GPU-only mutant it lists is one fragment on one line of
today's ``src/``, so the check that kills them on a CUDA machine runs the mutants docs/testing.md triaged."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_mutants", REPO / "scripts" / "gpu_mutants.py")
gpu_mutants = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_mutants)


def test_every_gpu_only_mutant_changes_one_line_of_the_current_source(tmp_path):
    names = [m[0] for m in gpu_mutants.MUTANTS]
    assert len(names) == len(set(names)) == 23 and set(gpu_mutants.EQUIVALENT) < set(names)
    for name, path, before, after, _ in gpu_mutants.MUTANTS:
        src = gpu_mutants.apply(name, path, before, after, tmp_path / name)
        original = (REPO / "src" / "fed" / path).read_text().splitlines()
        mutated = (src / "fed" / path).read_text()
        changed = [(a, b) for a, b in zip(original, mutated.splitlines()) if a != b]
        assert len(mutated.splitlines()) == len(original) and len(changed) == 1, name
        assert before in changed[0][0] and after in changed[0][1], name
        compile(mutated, path, "exec")
