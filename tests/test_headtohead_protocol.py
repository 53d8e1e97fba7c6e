"""The head-to-head's protocol is fixed before the cells it decides (docs/headtohead-protocol.md, issue 43): every
cell committed under reference/headtohead_protocol was run by a commit that descends from the protocol's first."""

import json
import shutil
import subprocess

import pytest
from conftest import REPO

PROTOCOL = "docs/headtohead-protocol.md"
CELLS = REPO / "reference/headtohead_protocol"


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("git") is None or git("rev-parse").returncode != 0, reason="not a git checkout")
def test_every_rerun_cell_descends_from_the_protocol_s_first_commit():
    first = git("log", "--diff-filter=A", "--format=%H", "--", PROTOCOL).stdout.split()
    if not first:
        pytest.skip(f"{PROTOCOL} is not committed yet (a shallow clone, or before its first commit)")
    manifest = CELLS / "MANIFEST.json"
    cells = json.loads(manifest.read_text())["cells"] if manifest.exists() else {}
    late = {c: h for c, h in cells.items() if git("merge-base", "--is-ancestor", first[-1], h).returncode != 0}
    assert not late, f"cells run before (or beside) the protocol's commit {first[-1][:10]}: {sorted(late)}"


def test_the_protocol_names_its_analysis_tuning_and_boards():
    text = (REPO / PROTOCOL).read_text()
    for section in ("Tuning: one rule for every method", "two boards", "step-matched", "Primary:", "Secondary:",
                    "Null per class", "bootstrap"):  # fmt: skip
        assert section in text, section


BOARDS = [
    REPO / "config/headtohead.yaml",
    REPO / "config/headtohead_cpu.yaml",
    REPO / "config/headtohead_protocol.yaml",
    REPO / "config/headtohead_protocol_authors.yaml",
]
# section 2's grids, one knob a method (FedData, DA-FL and the step-matched FedAvg: none)
KNOBS = {
    "p_fedavg": {"protocol.lr": [0.01, 0.02, 0.05]},
    "p_fedprox": {"mu": [0.01, 0.1, 1.0]},
    "p_scaffold": {"global_lr": [0.5, 1.0, 2.0]},
    "p_fedlc": {"tau": [0.1, 0.5, 1.0]},
    "a_fedlc": {"tau": [0.1, 0.5, 1.0]},
    "p_ccvr": {"virtual_per_class": [50, 100, 200]},
    "p_fedmix": {"lam": [0.05, 0.1, 0.2]},
    "p_fedzdac": {"start_round": [12, 16, 18]},  # 60, 80, 90 % of 20 rounds
    "p_fedzdas": {"start_round": [12, 16, 18]},
    "p_feddpms": {"vae_weight": [0.01, 0.05, 0.2]},
    "a_feddpms": {"vae_weight": [0.01, 0.05, 0.2]},
    "p_flea": {"lambda_dis": [0.5, 1.0, 2.0]},
    "a_flea": {"lambda_dis": [0.5, 1.0, 2.0]},
    "p_feddata": {},
    "p_fedavg_matched": {},
    "p_dafl": {},
}


@pytest.fixture(scope="module")
def boards():
    from fed.grid import Grid

    return Grid.from_files(BOARDS, REPO)


def test_both_boards_tune_every_method_by_one_rule(boards):
    """Section 2: five seeds, six regimes, every knob on validation splits of every seed for 6 of the 20 rounds by
    pooled_acc, after FedAvg's lr — but on the authors' board where Adam replaces the shared SGD."""
    config = boards.config
    shared, authors = (config["tables"][f"headtohead_protocol_{b}"] for b in ("shared", "authors"))
    for table in (shared, authors):
        assert table["seeds"] == [0, 1, 2, 3, 4] and len(table["partitions"]) == 6 and len(table["methods"]) == 13
    assert "headtohead_leaderboard" not in config["tables"]  # the board before the protocol is not rerun here
    cells = {(c["method"], c["partition"], c["seed"]) for t in (shared, authors) for c in boards.table_cells(t)}
    assert len(cells) == (13 + 4) * 6 * 5  # the boards share nine methods' cells
    preset = boards.preset("h2h_protocol")
    assert preset["rounds"] == 20 and preset["local_epochs"] == 1
    for name, grid in KNOBS.items():
        tune = config["methods"][name]["tune"]
        assert tune["grid"] == grid, name
        assert tune["rounds"] == 6 and tune["per_seed"] and tune["select_by"] == "pooled_acc", name
        assert tune["validation_fraction"] == 0.1, name
        uses_adam = config["methods"][name].get("protocol", {}).get("optimizer") == "adam"
        assert tune.get("after") == (None if name == "p_fedavg" or uses_adam else "p_fedavg"), name
    assert "tune" not in config["methods"]["a_dafl"]  # Table 2's SGD, as stated
    assert config["methods"]["p_fedzdac"]["tune"]["round_params"] == ["start_round"]


def test_the_boards_differ_only_by_the_authors_settings(boards):
    """Section 3: an authors' board method is its shared-board row with its authors' settings; a shared-board row is
    the old board's (config/papers/headtohead.yaml with the CPU cuts) without them, its knob tuned."""
    methods = boards.config["methods"]

    def bare(name, *drop):
        return {k: v for k, v in methods[name].items() if k not in ("tune", "protocol", *drop)}

    for method in ("feddpms", "dafl", "flea"):
        assert bare(f"a_{method}") == bare(f"p_{method}"), method
    assert bare("p_feddpms") == bare("h2h_feddpms", "vae_weight") and bare("p_dafl") == bare("h2h_dafl")
    assert bare("p_flea") == bare("h2h_flea", "lambda_dis")
    assert methods["a_fedlc"]["absent"] == "offset" and "absent" not in methods["p_fedlc"]
    assert methods["a_feddpms"]["protocol"] == methods["h2h_feddpms"]["protocol"]  # CityChan/Federated-DPMS
    assert methods["a_flea"]["protocol"] == {"optimizer": "adam", "lr": 0.001, "lr_decay": 0.98, "lr_min": 1e-5,
                                             "batch_size": 32, "model": "cnn_dpms_fmnist_block2"}  # fmt: skip
    assert "protocol" not in methods["p_feddpms"] and "protocol" not in methods["p_flea"]


def test_each_board_has_its_own_answer_and_costs_divide_by_its_fedavg(boards):
    """The two boards share a preset (h2h_protocol): each gets its own answer table (named after its leaderboard, not
    the preset, so one cannot overwrite the other), and their cost table's times are relative to p_fedavg."""
    assert boards.answers() == {
        "headtohead/protocol_shared_answer": "headtohead_protocol_shared",
        "headtohead/protocol_authors_answer": "headtohead_protocol_authors",
    }
    assert boards.cost_baseline("headtohead", "h2h_protocol") == "p_fedavg"
    outputs = boards.table_outputs()
    assert {f"{boards.reports}/tables/{a}.md" for a in boards.answers()} <= set(outputs)
