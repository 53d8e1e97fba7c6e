"""Every command the documentation shows works as written (issue 26).

The shell commands of README.md, docs/**/*.md (the results pages under docs/results/ included), config/README.md
and the config files' comments are extracted and checked without running them: a Snakemake command through
Snakemake's own argument parser (every ``--configfile`` is an existing YAML mapping, so a target written after
``--configfile`` is caught; the configs pass ``fed check``; a command with targets is dry-run), a ``fed`` command by
its subcommand, a ``python`` command by its file or module and ``--help``. Commands that install, start a server
or run the suite are listed in ``NOT_CHECKED`` with why.
"""

import contextlib
import functools
import io
import itertools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, snakemake

DOCS = [REPO / "README.md", REPO / "config/README.md", *sorted((REPO / "docs").rglob("*.md"))]
CONFIGS = sorted((REPO / "config").rglob("*.yaml"))
PROGRAMS = ("snakemake", "fed", "python")
NOT_CHECKED = {  # first words → why a test does not run them
    "scripts/setup.sh": "creates the virtual environment the tests run in",
    "source": "activates that environment",
    "python -m pytest": "the test suite itself",
    "mutmut": "mutation testing, hours long (docs/testing.md)",
    "mlflow ui": "starts a server",
    "pip install": "installs packages (Flower's own venv for benchmarks/flower_fedavg.py)",
    "bash scripts/device_campaign.sh": "runs on a lent GPU machine; tests/test_campaign.py runs it on the CPU",
    "bash scripts/device_prepare.sh": "downloads wheels; tests/test_campaign.py runs it without them",
    "printf": "writes an overlay for the command after it",
    "for pid in $(pgrep": "lowers running campaigns' CPU weight (Linux /proc)",
}


def commands_in_markdown(text: str) -> list[str]:
    """Lines of ```bash blocks (continuations joined, comments dropped) and inline `snakemake …`-like spans."""
    found = []
    for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = " ".join(re.sub(r"\s+#.*$", "", line).split())
            if line and not line.startswith("#"):
                found.append(line)
    found += re.findall(rf"`((?:{'|'.join(PROGRAMS)}) [^`]*)`", text)
    return found


def commands_in_config(text: str) -> list[str]:
    """Commands a config file's comments show: after ``#`` at the start of a comment (a line ending in ``\\`` goes
    on in the next comment), or in backticks."""
    found, comments = [], []
    for line in text.splitlines():
        comment = line.partition("#")[2].strip()
        if comments and comments[-1].endswith("\\"):
            comments[-1] = f"{comments[-1][:-1].rstrip()} {comment}"
        else:
            comments.append(comment)
    for comment in comments:
        if m := re.match(rf"((?:{'|'.join(PROGRAMS)}) .*?)(?:\s{{2,}}#.*)?$", comment):
            found.append(m[1].rstrip("`;. "))
        found += re.findall(rf"`((?:{'|'.join(PROGRAMS)}) [^`]*)`", comment)
    return found


def documented() -> list[tuple[str, str]]:
    out = [(p.relative_to(REPO).as_posix(), c) for p in DOCS for c in commands_in_markdown(p.read_text())]
    out += [(p.relative_to(REPO).as_posix(), c) for p in CONFIGS for c in commands_in_config(p.read_text())]
    return sorted(set(out))


def braces(word: str) -> list[str]:
    """Bash's brace expansion of one word (``table{1,2}.html``)."""
    m = re.search(r"\{([^{}]*,[^{}]*)\}", word)
    if not m:
        return [word]
    return list(itertools.chain(*(braces(word[: m.start()] + alt + word[m.end() :]) for alt in m[1].split(","))))


def words(command: str) -> list[str]:
    """The command's words, brace-expanded, under any ``setsid``, ``nohup`` or ``nice -n N`` it runs in."""
    ws = [w for word in shlex.split(command) for w in braces(word)]
    while ws[0] in ("setsid", "nohup", "nice"):
        ws = ws[3:] if ws[:2] == ["nice", "-n"] else ws[1:]
    return ws


@functools.cache
def fed_check(configfiles: tuple[str, ...]) -> subprocess.CompletedProcess:
    """``fed check`` run from the repository root, in this process (a new one would spend seconds on imports)."""
    from fed.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["check", *(str(REPO / c) for c in configfiles)])
        except SystemExit as stop:  # fed check's error: the file and line, or every problem
            code = 1
            err.write(str(stop.code))
    return subprocess.CompletedProcess(["fed", "check", *configfiles], code, out.getvalue(), err.getvalue())


def check_snakemake(argv: list[str], tmp_path: Path) -> None:
    from snakemake.cli import get_argument_parser

    args = get_argument_parser().parse_args(argv)
    configfiles = [str(p) for p in args.configfile or []]
    for path in configfiles:
        file = REPO / path
        assert file.is_file(), f"--configfile {path}: no such file (a target written after --configfile?)"
        assert isinstance(yaml.safe_load(file.read_text()), dict), f"--configfile {path} is not a YAML mapping"
    for profile in getattr(args, "profile", None) or []:
        assert (REPO / profile / "config.yaml").is_file(), f"--profile {profile}: no profiles/…/config.yaml"
    check = fed_check(tuple(configfiles))
    assert check.returncode == 0, check.stdout + check.stderr
    if args.targets:  # a dry run proves the workflow makes them under this config (one per config, all its targets)
        proc = dry_run(tuple(configfiles), tmp_path.parent)
        assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@functools.cache
def targets_by_config() -> dict[tuple[str, ...], set[str]]:
    from snakemake.cli import get_argument_parser

    out: dict[tuple[str, ...], set[str]] = {}
    for _, command in documented():
        program, *argv = words(command)
        if program == "snakemake" and "<" not in command:
            args = get_argument_parser().parse_args(argv)
            out.setdefault(tuple(str(p) for p in args.configfile or []), set()).update(args.targets)
    return out


@functools.cache
def dry_run(configfiles: tuple[str, ...], tmp: Path) -> subprocess.CompletedProcess:
    workdir = tmp / ("dry-" + "-".join(Path(c).stem for c in configfiles))
    workdir.mkdir(exist_ok=True)
    extra = ["--configfile", *[str(REPO / c) for c in configfiles]] if configfiles else []
    targets = sorted(targets_by_config()[configfiles])
    return snakemake(workdir, *targets, "-n", "--quiet", "rules", *extra, check=False)


def check_fed(argv: list[str]) -> None:
    """The subcommand exists (its --help); ``fed check`` also checks the configs it names."""
    proc = subprocess.run([sys.executable, "-m", "fed.cli", *argv[:1], "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, f"fed {argv[:1]}: {proc.stderr[-1000:]}"
    if argv[:1] == ["check"]:
        check = fed_check(tuple(argv[1:]))
        assert check.returncode == 0, check.stdout + check.stderr


def check_python(argv: list[str]) -> None:
    if argv[0] == "-m":
        target = [sys.executable, "-m", argv[1], "--help"]
    else:
        assert (REPO / argv[0]).is_file(), f"python {argv[0]}: no such file"
        target = [sys.executable, argv[0], "--help"]
    proc = subprocess.run(target, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize(("where", "command"), documented(), ids=lambda v: v if "/" in v else None)
def test_documented_command_works_as_written(where, command, tmp_path):
    if any(command.startswith(prefix) for prefix in NOT_CHECKED) or "<" in command:  # <placeholder>: a pattern
        pytest.skip(NOT_CHECKED.get(next((p for p in NOT_CHECKED if command.startswith(p)), ""), "a pattern"))
    program, *argv = words(command)
    if program == "snakemake":
        check_snakemake(argv, tmp_path)
    elif program == "fed":
        check_fed(argv)
    elif program == "python":
        check_python(argv)
    else:
        raise AssertionError(f"{where}: {command!r} is not a command this test knows; add it to NOT_CHECKED")


def test_a_target_after_configfile_is_caught(tmp_path):
    """The failure a newcomer met (issue 26): --configfile takes every following word, the target included."""
    with pytest.raises(AssertionError, match="no such file"):
        check_snakemake(
            words("snakemake --configfile config/fmnist.yaml reports/tables/fedzda/table1.html")[1:], tmp_path
        )


def test_the_extraction_finds_the_commands():
    found = {c for _, c in documented()}
    assert "snakemake --cores 2 --configfile config/fmnist.yaml" in found  # README and docs/results/fedzda.md
    assert "snakemake --cores 2 --configfile config/flea_quick.yaml config/flea_sweeps_quick.yaml" in found
    assert commands_in_markdown("```bash\nsnakemake -n \\\n  --cores 1   # dry\n```") == ["snakemake -n --cores 1"]
    assert commands_in_config("#   snakemake --cores 2 --configfile config/x.yaml  # 5 min") == [
        "snakemake --cores 2 --configfile config/x.yaml"
    ]
    assert commands_in_config("#   python -m fed campaign x.yaml \\\n#     --write-plan p.json\nkey: 1  # a value") == [
        "python -m fed campaign x.yaml --write-plan p.json"
    ]
    assert braces("t{1,2}.html") == ["t1.html", "t2.html"]
    assert words("setsid nice -n 19 python -m fed campaign &") == ["python", "-m", "fed", "campaign", "&"]
