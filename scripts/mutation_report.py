"""The mutation score per file from the last ``mutmut run`` (its ``mutants/**/*.py.meta``), as the Markdown table
docs/testing.md publishes, followed by the surviving mutants by file (``mutmut show <name>`` prints each diff).

    mutmut run && python scripts/mutation_report.py [--survivors]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from mutmut.stats import status_by_exit_code

COLUMNS = ("killed", "survived", "no tests", "timeout", "suspicious", "not checked")


def statuses(root: Path) -> dict[str, dict[str, str]]:
    """{source file: {mutant name: status}} for every mutated file under ``root``."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for meta in sorted(root.rglob("*.py.meta")):
        source = str(meta.relative_to(root).with_suffix(""))
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            out[source][name] = "not checked" if code is None else status_by_exit_code[code]
    return out


def table(by_file: dict[str, dict[str, str]]) -> str:
    lines = ["| file | mutants | " + " | ".join(COLUMNS) + " | score |", "|---" * (len(COLUMNS) + 3) + "|"]
    total: Counter = Counter()
    for source, mutants in by_file.items():
        counts = Counter(mutants.values())
        total.update(counts)
        lines.append(_row(f"`{source}`", counts))
    lines.append(_row("**all**", total))
    return "\n".join(lines)


def _row(label: str, counts: Counter) -> str:
    n = sum(counts.values())
    checked = counts["killed"] + counts["survived"] + counts["timeout"]
    score = f"{100 * (counts['killed'] + counts['timeout']) / checked:.1f} %" if checked else "–"
    return f"| {label} | {n} | " + " | ".join(str(counts[c]) for c in COLUMNS) + f" | {score} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"), help="mutmut's working copy")
    parser.add_argument("--survivors", action="store_true", help="also list surviving and untested mutants")
    args = parser.parse_args()
    by_file = statuses(args.mutants)
    if not by_file:
        raise SystemExit(f"no mutmut results under {args.mutants}/: run `mutmut run` first")
    print(table(by_file))
    if args.survivors:
        for source, mutants in by_file.items():
            left = [m for m, s in mutants.items() if s in ("survived", "no tests")]
            if left:
                print(f"\n{source}:\n" + "\n".join(f"  {m} ({mutants[m]})" for m in left))


if __name__ == "__main__":
    main()
