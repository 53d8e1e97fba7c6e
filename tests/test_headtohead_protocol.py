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
