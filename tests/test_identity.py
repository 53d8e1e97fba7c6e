"""A run's identity is the code that determines its numbers (issue 26): a report edit changes no run, an edit to
one method changes its own cells and stages only — in the hash (fast, on a copy of the package) and in the jobs
Snakemake plans (slow, on the smoke run)."""

import re
import shutil

import pytest
from conftest import REPO, snakemake

from fed import identity


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """``fed.identity`` pointed at a copy of the package that a test may edit."""
    root = tmp_path / "fed"
    shutil.copytree(REPO / "src/fed", root, ignore=shutil.ignore_patterns("__pycache__", "data"))
    monkeypatch.setattr(identity, "ROOT", root)
    caches = (identity.modules, identity.import_graph, identity.algorithm_modules, identity.code_hash)
    for cached in (*caches, identity.module_hash, identity.script_hash):
        cached.cache_clear()
    yield root
    for cached in (*caches, identity.module_hash, identity.script_hash):
        cached.cache_clear()


def hashes() -> dict[str, str]:
    for cached in (identity.modules, identity.import_graph, identity.code_hash, identity.module_hash):
        cached.cache_clear()
    return {name: identity.algorithm_code_hash(name) for name in identity.algorithm_modules() if name != "base"}


def touch(path):
    path.write_text(path.read_text() + "\n# an edit\n")


def test_what_the_hash_covers():
    core = identity.closure(identity.ENTRY)
    assert {"fed.engine", "fed.rounds", "fed.training", "fed.data.partition", "fed.models.cnn"} <= core
    assert not {m for m in core if m.startswith("fed.reporting.")} | (core & {"fed.cli", "fed.tracking"})
    assert "fed.algorithms.scaffold" not in core  # the registry is not followed into the methods
    assert identity.closure("fed.algorithms.fedzda") >= {"fed.algorithms.fedzda", "fed.zsdg"}
    assert identity.algorithm_modules()["naivemix"] == "fed.algorithms.fedmix"  # two classes of one file
    with pytest.raises(ValueError, match="unknown algorithm 'nope'"):
        identity.algorithm_code_hash("nope")


def test_an_edit_changes_exactly_the_runs_that_execute_it(package_copy):
    before = hashes()
    shared = {h for h in before.values() if list(before.values()).count(h) > 1}
    assert {frozenset(m for m in before if before[m] == h) for h in shared} == {  # one file, one identity
        frozenset({"fedmix", "naivemix"}),
        frozenset({"fedzdac", "fedzdas"}),
    }
    touch(package_copy / "reporting/figures.py")
    touch(package_copy / "tracking.py")
    touch(package_copy / "provenance.py")  # where a cell ran (issue 40): recorded, never its identity
    assert hashes() == before
    touch(package_copy / "algorithms/scaffold.py")
    after = hashes()
    assert {m for m in before if after[m] != before[m]} == {"scaffold"}
    touch(package_copy / "zsdg.py")
    changed = {m for m, h in hashes().items() if h != after[m]}
    assert changed == {"fedzdac", "fedzdas"}
    after = hashes()
    touch(package_copy / "gan_stage.py")  # DA-FL's GAN stage's scheduling (fed.runner.METHOD_STAGES): no run
    assert hashes() == after
    touch(package_copy / "dpgan.py")  # one client's GAN: DA-FL's cells and stages only
    touch(package_copy / "ghost_clipping.py")
    assert {m for m, h in hashes().items() if h != after[m]} == {"dafl"}
    touch(package_copy / "rounds.py")  # the engine: every run
    assert all(h != before[m] for m, h in hashes().items())


def test_a_gan_client_s_code_is_its_own_closure_not_the_engine_nor_the_stage_s_scheduling(package_copy):
    """``module_hash`` keys a GAN client's kept state and its finished record (``fed.dpgan.client_code``): an edit
    to the FL engine or to the stage's scheduling keeps both, an edit to what one client's PSG runs does not."""
    before = identity.module_hash("fed.dpgan")
    for edit in ("rounds.py", "engine.py", "gan_stage.py", "algorithms/dafl.py", "campaign.py"):
        touch(package_copy / edit)
    hashes()
    assert identity.module_hash("fed.dpgan") == before
    for edit in ("ghost_clipping.py", "models/cgan.py", "dpgan.py"):
        touch(package_copy / edit)
        hashes()
        assert identity.module_hash("fed.dpgan") != before
        before = identity.module_hash("fed.dpgan")


def test_a_method_stage_runs_code_in_its_method_identity():
    """A stage kind whose code is one method's runs from a module the training path does not import, and every
    module that module runs, its own scheduling aside, is in the identity of the method the kind names (the stage
    rule's hash, ``GridPlan.stage_algorithm``)."""
    from fed.runner import METHOD_STAGES, stage_runner
    from fed.stages import STAGE_KINDS

    for kind, module in METHOD_STAGES.items():
        method = identity.closure(identity.algorithm_modules()[STAGE_KINDS[kind].algorithm])
        assert module not in identity.closure(identity.ENTRY) | method
        assert identity.closure(module) - {module} <= identity.closure(identity.ENTRY) | method
        assert stage_runner(kind).__module__ == module


def planned(stdout: str, rule: str) -> list[dict[str, str]]:
    """The wildcards of every job of ``rule`` in a dry run (each job: from its ``rule …:`` line to the next)."""
    jobs = re.finditer(r"^(?:local)?rule (\w+):\n(.*?)(?=^\[|^(?:local)?rule |\Z)", stdout, re.M | re.S)
    return [
        dict(re.findall(r"(\w+)=([^,\s]+)", re.search(r"wildcards: (.*)", m[2])[1]))
        for m in jobs
        if m[1] == rule and "wildcards:" in m[2]
    ]


@pytest.mark.slow
def test_snakemake_reruns_what_an_edit_changes_and_nothing_else(smoke_run, tmp_path):
    workdir, _ = smoke_run
    repo = tmp_path / "repo"
    repo.mkdir()
    for part in ("Snakefile", "config.yaml", "config", "workflow", "envs", "src"):
        copy = shutil.copytree if (REPO / part).is_dir() else shutil.copyfile
        copy(
            REPO / part,
            repo / part,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}),
        )

    def dry_run():
        cmd = ("-s", str(repo / "Snakefile"), "-n", "--configfile", str(repo / "config/smoke.yaml"))
        return snakemake(workdir, *cmd).stdout

    touch(repo / "src/fed/reporting/figures.py")
    out = dry_run()
    assert not planned(out, "train") and not planned(out, "stage")
    touch(repo / "src/fed/algorithms/qffl.py")
    out = dry_run()
    cells = {p.parent.as_posix() for p in (workdir / "results/runs").glob("*/*/*/qffl/seed*/metrics.json")}
    assert cells and {j["method"] for j in planned(out, "train")} == {"qffl"}
    assert len(planned(out, "train")) == len(cells)
    assert planned(out, "stage") and all(j["stage"].startswith("tuning") for j in planned(out, "stage"))


def test_a_reporting_edit_reruns_the_reports_that_run_it_and_no_training(package_copy):
    """``script_hash`` (the reporting rules' ``code`` param) covers what a workflow script imports, where a cell ran
    included, and nothing else: an edit to the summary's picture reruns the summary, not the tables; one to a
    method reruns its runs only (test above), no report."""
    scripts = {s: REPO / f"workflow/scripts/{s}.py" for s in ("summary", "table", "figure", "claims")}

    def reports(*loaded):
        for cached in (identity.modules, identity.import_graph, identity.script_hash):
            cached.cache_clear()
        return {s: identity.script_hash(path, *loaded) for s, path in scripts.items()}

    before = reports()
    touch(package_copy / "algorithms/scaffold.py")
    touch(package_copy / "rounds.py")
    assert reports() == before
    touch(package_copy / "reporting/summary.py")
    after = reports()
    assert {s for s in before if after[s] != before[s]} == {"summary"}
    touch(package_copy / "reporting/verdicts.py")  # every verdict: the tables, claims and summary that give them
    changed = {s for s, h in reports().items() if h != after[s]}
    assert {"table", "claims", "summary"} <= changed
    after = reports()
    touch(package_copy / "provenance.py")  # a table's cells' machines set its floor: outside every run, not a report
    assert reports()["table"] != after["table"]
    # a figure's kind is loaded by name (the registry's importlib): the figure rule names it
    heat_map, curves = "fed.reporting.figure_kinds.gain_heatmap", "fed.reporting.figure_kinds.accuracy_curves"
    before = {kind: reports(kind)["figure"] for kind in (heat_map, curves)}
    touch(package_copy / "reporting/figure_kinds/gain_heatmap.py")
    assert reports(heat_map)["figure"] != before[heat_map] and reports(curves)["figure"] == before[curves]
