"""What users of Snakemake workflows expect: pinned conda envs that match the package, lint and format clean."""

import re
import subprocess
import sys
import tomllib

import yaml
from conftest import REPO, snakemake


def pins(requirements: list[str]) -> dict[str, str]:
    return {m[1].lower(): m[2] for r in requirements if (m := re.match(r"^([A-Za-z0-9_.-]+)==(\S+)$", r.strip()))}


def test_conda_env_pins_match_pyproject():
    project = pins(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])
    assert {"torch", "torchvision", "mlflow", "snakemake"} <= set(project)
    for env_file in (REPO / "envs").glob("*.yaml"):
        env = yaml.safe_load(env_file.read_text())
        pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
        env_pins = pins(pip)
        assert env_pins == {k: v for k, v in project.items() if k in env_pins} and set(project) <= set(env_pins), (
            f"{env_file.name} pins {env_pins}, pyproject {project}"
        )


def test_every_rule_has_a_conda_env_and_a_log(tmp_path):
    proc = snakemake(tmp_path, "--lint", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Congratulations, your workflow is in a good condition" in out, out[-3000:]


def test_snakefmt_clean():
    proc = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow/rules"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_python_is_ruff_clean():
    """Lint (pyflakes, pycodestyle, isort, bugbear, pyupgrade) and format, configured in pyproject.toml."""
    for args in (["check", "."], ["format", "--check", "."]):
        proc = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 0, f"ruff {' '.join(args)}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"


def test_slurm_profile_dry_run(tmp_path):
    """The SLURM profile builds the full DAG (no SLURM binaries are needed for a dry run)."""
    proc = snakemake(
        tmp_path, "--profile", str(REPO / "profiles/slurm"), "-n", "--configfile", str(REPO / "config/smoke.yaml")
    )
    # tables: 2 partitions x 5 methods x 2 seeds; Fig. 3 oracle; Fig. 4 two FL models; Fig. 5's start at 3 x 2 seeds
    # (its start at 2 is the tables' Fed-ZDAC); the baselines table: FedAvg, FedData and a FedProx sweep of 2 values
    # on a Dirichlet partition, one seed; DA-FL: Table 3's 3 methods x 2 seeds on 1-Label, Table 4's other two
    # budgets (its ε0 = 50 is Table 3's cell); FedDPMS: FedAvg and FedDPMS on 2 Dirichlet partitions, one seed;
    # FLea: FedAvg and FLea on Qua(3), two seeds
    assert len(re.findall(r"^rule train:", proc.stdout, re.M)) == 20 + 1 + 2 + 2 + 2 + 2 + 6 + 2 + 4 + 4


def test_training_jobs_declare_the_gpu_resource(tmp_path):
    """`--config gpu_per_job=1 --resources gpu=N` caps GPU jobs at N: only training jobs request the GPU."""
    out = snakemake(
        tmp_path,
        "-n",
        "--configfile",
        str(REPO / "config/smoke.yaml"),
        "--config",
        "gpu_per_job=1",
        "--resources",
        "gpu=1",
    ).stdout
    jobs = re.split(r"\n\[.*?\]\n", out)
    train = [j for j in jobs if re.search(r"^(local)?rule (train|stage):", j, re.M)]
    other = [j for j in jobs if re.search(r"^(local)?rule (partition|table|figure|prepare_data):", j, re.M)]
    assert train and all("gpu=1" in j for j in train)
    assert other and not any("gpu=1" in j for j in other)
