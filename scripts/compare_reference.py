"""Before/after of committed reference cells: every cell whose metrics.json differs between a git revision and the
working tree, with the reported metrics (the preset's ``report`` round: last or best) of both, as Markdown.

    python scripts/compare_reference.py <revision> reference/dafl_quick [reference/flea_quick …]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

METRICS = ("global_acc", "local_acc_mean")


def at_revision(revision: str, path: Path) -> dict | None:
    proc = subprocess.run(["git", "show", f"{revision}:{path.as_posix()}"], capture_output=True, text=True)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def reported(record: dict | None) -> dict:
    if record is None:
        return {}
    return record.get(record.get("config", {}).get("report", "last")) or {}


def change(a, b) -> str:
    if a is None and b is None:
        return "–"
    if a is None or b is None:
        return f"{a if a is not None else '–'} → {b if b is not None else '–'}"
    return f"{a:.2f} → {b:.2f} ({b - a:+.2f})"


def rows(revision: str, folder: Path, metrics: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted(folder.rglob("metrics.json")):
        before, after = at_revision(revision, path), json.loads(path.read_text())
        if before == after:
            continue
        old, new = reported(before), reported(after)
        cells = [change(old.get(m), new.get(m)) for m in metrics]
        out.append(f"| `{path.parent.relative_to(folder / 'runs')}` | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision", help="the git revision holding the cells before (e.g. main~3)")
    parser.add_argument("folders", nargs="+", type=Path, help="reference folders (reference_dir of a config)")
    parser.add_argument("--metrics", nargs="+", default=METRICS, help=f"default: {' '.join(METRICS)}")
    args = parser.parse_args()
    print("| cell | " + " | ".join(f"{m} before → after" for m in args.metrics) + " |")
    print("|---" * (len(args.metrics) + 1) + "|")
    for folder in args.folders:
        print("\n".join(rows(args.revision, folder, tuple(args.metrics))))


if __name__ == "__main__":
    main()
