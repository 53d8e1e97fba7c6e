"""Kill the GPU-only mutants on a CUDA machine (docs/testing.md, "GPU-only" column).

Each mutant below moves a tensor to the wrong device: on a CPU it computes the same values (mutmut reports it
surviving), on CUDA it should fail, unless ``EQUIVALENT`` says why it cannot. The script applies each one to a
scratch copy of ``src/`` (one substituted fragment, which must lie on exactly one line of its file) and runs the GPU
tests that exercise it against that copy. A mutant is *killed* when those tests fail, *survived* when they pass.
Names are mutmut's (``mutmut show NAME`` prints the diff while mutants/ matches ``src/``); the lines are written out
here so the check needs no mutmut run.

    python scripts/gpu_mutants.py [--jobs 4] [--out gpu_mutants.tsv]     # on a machine with CUDA

The tests first run against the unmutated code and must pass there. Exit status 0 when every mutant ends as
expected: killed, or surviving where ``EQUIVALENT`` says why it computes the same on CUDA too; the table goes to
stdout and --out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPU_TESTS = "tests/test_gpu.py"

# (mutmut name, file under src/fed/, a fragment of the original line, what the mutant makes of it, the test_gpu.py
# tests that run it: a pytest -k expression). The fragment must lie on exactly one line of the file.
ALGO, ZSDG_DEVICE = "algorithms/", "device = device if device is not None else next(model.parameters()).device"
MUTANTS = [
    ("CCVR_server_update__mutmut_38", ALGO + "ccvr.py", "y.to(ctx.device),", "y.to(None),", "ccvr"),
    (
        "CCVR_virtual__mutmut_49",
        ALGO + "ccvr.py",
        "dtype=mean.dtype).to(mean.device)",
        "dtype=mean.dtype).to(None)",
        "ccvr",
    ),
    (
        "FedBR_local_loss__mutmut_11",
        ALGO + "fedbr.py",
        "num_classes, device=x.device)",
        "num_classes, device=None)",
        "fedbr",
    ),
    ("FedBR_local_loss__mutmut_14", ALGO + "fedbr.py", "num_classes, device=x.device)", "num_classes, )", "fedbr"),
    (
        "FLea_local_loss__mutmut_83",
        ALGO + "flea.py",
        "pick[:m], device=buf.features.device)",
        "pick[:m], device=None)",
        "flea",
    ),
    ("FLea_local_loss__mutmut_85", ALGO + "flea.py", "pick[:m], device=buf.features.device)", "pick[:m], )", "flea"),
    # β's device: built in FLea.step_draws since the batched path (issue 41), the same mutants on today's line
    ("FLea_local_loss__mutmut_89", ALGO + "flea.py", "beta.to(x.device)}", "beta.to(device=None)}", "flea"),
    ("FLea_local_loss__mutmut_92", ALGO + "flea.py", "beta.to(x.device)}", "beta}", "flea"),
    (
        "x_contrastive_loss__mutmut_30",
        "losses.py",
        "torch.long, device=z.device)",
        "torch.long, device=None)",
        "moon or fedbr",
    ),
    ("x_contrastive_loss__mutmut_33", "losses.py", "torch.long, device=z.device)", "torch.long, )", "moon or fedbr"),
    ("x_zsdg_batched__mutmut_1", "zsdg.py", ZSDG_DEVICE, "device = None", "zsdg or fedzda"),
    (
        "x_zsdg_batched__mutmut_3",
        "zsdg.py",
        "if device is not None else",
        "if (device is not None) or True else",
        "zsdg",
    ),
    ("x_zsdg_batched__mutmut_4", "zsdg.py", "if device is not None else", "if device is None else", "zsdg"),
    (
        "x_zsdg_batched__mutmut_46",
        "zsdg.py",
        "arange(num_classes, device=device)",
        "arange(num_classes, device=None)",
        "zsdg or fedzda",
    ),
    (
        "x_zsdg_batched__mutmut_48",
        "zsdg.py",
        "arange(num_classes, device=device)",
        "arange(num_classes, )",
        "zsdg or fedzda",
    ),
    (
        "x_zsdg_batched__mutmut_58",
        "zsdg.py",
        "x = x.to(device, memory_format",
        "x = x.to(None, memory_format",
        "zsdg or fedzda",
    ),
    (
        "x_zsdg_batched__mutmut_60",
        "zsdg.py",
        "x = x.to(device, memory_format",
        "x = x.to(memory_format",
        "zsdg or fedzda",
    ),
    (
        "x_code_class_mean__mutmut_9",
        "dpms.py",
        "randn(mu.shape, generator=generator).to(mu)",
        "randn(mu.shape, generator=generator).to(None)",
        "feddpms",
    ),
    (
        "x_code_class_mean__mutmut_15",
        "dpms.py",
        "generator=generator).to(mu.device)",
        "generator=generator).to(None)",
        "feddpms",
    ),
    (
        "x_noisy_mean_pool__mutmut_16",
        "dpms.py",
        "generator=generator).to(mean)",
        "generator=generator).to(None)",
        "feddpms",
    ),
    (
        "x_vae_loss__mutmut_20",  # ε's device: drawn in FedDPMS.step_draws since the batched path (issue 41)
        ALGO + "feddpms.py",
        "weight.dtype).to(x.device)}",
        "weight.dtype).to(None)}",
        "feddpms",
    ),
    (
        "FedDPMS_training_data__mutmut_10",
        ALGO + "feddpms.py",
        "decoder.eval()(z.to(ctx.device))",
        "decoder.eval()(z.to(None))",
        "feddpms",
    ),
    (
        "FedDPMS_training_data__mutmut_12",
        ALGO + "feddpms.py",
        "(x_syn, y.to(ctx.device))",
        "(x_syn, y.to(None))",
        "feddpms",
    ),
]
# Survivors read as equivalent in docs/testing.md and seen surviving on an H100 (2026-11-26): a CPU index tensor
# indexes a CUDA tensor, and the latents reach training_data on the run's device already.
EQUIVALENT = {
    "FLea_local_loss__mutmut_83": "CPU indices index the CUDA buffer",
    "FLea_local_loss__mutmut_85": "CPU indices index the CUDA buffer",
    "x_code_class_mean__mutmut_15": "CPU indices index the CUDA draws",
    "FedDPMS_training_data__mutmut_10": "the received latents are on the run's device already",
}


def apply(name: str, path: str, before: str, after: str, dest: Path) -> Path:
    """A copy of src/ under ``dest`` with ``before`` replaced by ``after`` in ``src/fed/<path>``."""
    shutil.copytree(REPO / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    target = dest / "src" / "fed" / path
    lines = target.read_text().splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if before in line]
    if len(hits) != 1 or lines[hits[0]].count(before) != 1:
        raise SystemExit(f"{name}: {before!r} is on {len(hits)} lines of {path}, not exactly once on one")
    lines[hits[0]] = lines[hits[0]].replace(before, after)
    target.write_text("".join(lines))
    return dest / "src"


def run_gpu_tests(src: Path, tests: str) -> tuple[int, float, str]:
    """The GPU tests selected by ``tests`` run against ``src``: (exit status, seconds, pytest's summary line)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-m", "gpu", "-p", "no:cacheprovider", GPU_TESTS, "-k", tests]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    if proc.returncode == 5 or ("passed" not in last and "failed" not in last):
        raise SystemExit(f"no GPU test ran for -k {tests!r} ({last}); is CUDA available?")
    return proc.returncode, time.perf_counter() - t0, last


def check(mutant: tuple[str, str, str, str, str], scratch: Path) -> tuple[str, str, float, str]:
    name, path, before, after, tests = mutant
    code, seconds, last = run_gpu_tests(apply(name, path, before, after, scratch / name), tests)
    result = "killed" if code else "survived"
    expected = "survived" if name in EQUIVALENT else "killed"
    return name, result if result == expected else f"{result} (UNEXPECTED)", seconds, last


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=4, help="mutants checked side by side (default 4)")
    ap.add_argument("--out", type=Path, help="also write the table here (TSV)")
    ap.add_argument("--only", nargs="*", help="check only these mutants")
    args = ap.parse_args(argv)
    todo = [m for m in MUTANTS if not args.only or m[0] in args.only]
    with ThreadPoolExecutor(args.jobs) as pool:  # a kill means something only where the unmutated code passes
        selections = sorted({m[4] for m in todo})
        for tests, (code, _, last) in zip(selections, pool.map(lambda t: run_gpu_tests(REPO / "src", t), selections)):
            if code:
                raise SystemExit(f"the unmutated code fails the GPU tests -k {tests!r} ({last}): fix that first")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda m: check(m, Path(tmp)), todo))
    table = "mutant\tresult\tseconds\tpytest\n" + "".join(f"{n}\t{r}\t{s:.0f}\t{p}\n" for n, r, s, p in rows)
    print(table, end="")
    if args.out:
        args.out.write_text(table)
    killed = sum(r.startswith("killed") for _, r, _, _ in rows)
    unexpected = [n for n, r, _, _ in rows if "UNEXPECTED" in r]
    print(f"{killed} of {len(rows)} killed, {len(rows) - killed} survived; unexpected: {unexpected or 'none'}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
