"""fed.migrate's pure parts by hand: a dry run's params reason read, "only the key order changed", where Snakemake
keeps a record, and the refusal to touch a tree a Snakemake run holds (the migration itself: test_workflow.py, on
the smoke tree)."""

import pytest

from fed import migrate


def test_a_dry_run_s_params_reason_reads_as_the_reprs_before_and_now():
    prefix = "Params have changed since last execution: Union of exclusive params before and now across all output: "
    reason = prefix + "before: {'b': 1, 'a': 'x, now: y'},'z' now: {'a': 'x, now: y', 'b': 1} "
    assert migrate.params_change(reason) == (["{'b': 1, 'a': 'x, now: y'}", "'z'"], ["{'a': 'x, now: y', 'b': 1}"])
    tail = "; Software environment definition has changed since last execution"
    assert migrate.params_change(prefix + "before: <nothing exclusive> now: 0.5 " + tail) == ([], ["0.5"])
    assert migrate.params_change("Missing output files: a.csv") is None
    assert migrate.params_change(prefix + "before: {'a': nan} now: {'a': nan} ") is None  # not literals


def test_only_key_order_compares_values_with_every_dict_s_keys_sorted():
    assert migrate.only_key_order(
        ["{'b': 1, 'a': {'d': [3, 1], 'c': 2.0}}"], ["{'a': {'c': 2.0, 'd': [3, 1]}, 'b': 1}"]
    )
    assert not migrate.only_key_order(["{'a': [3, 1]}"], ["{'a': [1, 3]}"])  # a list's order is a value
    assert not migrate.only_key_order(["{'a': 1, 'b': 2}"], ["{'b': 2, 'a': 1.5}"])
    assert not migrate.only_key_order(["{'a': 1}", "'x'"], ["{'a': 1}"])  # a param gone
    assert not migrate.only_key_order([], [])
    assert not migrate.only_key_order(["{'a': 1, 'b': 2}"], ["{'b': 2, 'a': 1}"])  # now unsorted: the rule's order


def test_record_path_is_snakemake_s_base64_split_into_folders(tmp_path, monkeypatch):
    assert migrate.record_path(tmp_path, "a/b") == tmp_path / "YS9i"  # urlsafe base64 of 'a/b'
    monkeypatch.setattr(migrate.os, "pathconf", lambda path, name: 9)  # NAME_MAX 9: parts of 8, '@' but the last
    # urlsafe base64 of 'results/x.json' is cmVzdWx0cy94Lmpzb24= (20 characters)
    assert migrate.record_path(tmp_path, "results/x.json") == tmp_path / "@cmVzdWx0" / "@cy94Lmpz" / "b24="


def test_a_tree_a_snakemake_run_holds_is_refused_before_anything_runs(tmp_path):
    (tmp_path / ".snakemake/locks").mkdir(parents=True)
    (tmp_path / ".snakemake/locks/0.output.lock").write_text("results/x.json\n")
    with pytest.raises(ValueError, match="a Snakemake run holds"):
        migrate.migrate(tmp_path / "Snakefile", tmp_path, [])
