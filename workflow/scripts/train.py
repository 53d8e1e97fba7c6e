"""Train one cell; progress (rounds, ETA) goes to the rule's log."""

import shutil
import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # fed from this checkout, also in conda envs

from fed.config import FLConfig, MethodSpec
from fed.runner import run_cell
from fed.tracking import git_commit

w, p = snakemake.wildcards, snakemake.params
tracking = dict(p.tracking)
tracking["tags"] = dict(tracking["tags"], git_commit=git_commit(snakemake.scriptdir))
# from the config, not a param: switching the mode must not rerun the cells (a changed param would)
tracking["live"] = snakemake.config["tracking_mode"] == "live"
# --config retrain=true (a string there): start from round 0; by default a job resumes its checkpoint, also the final
# one (a failed job's outputs come back without training), so --forcerun alone would recompute nothing
if str(snakemake.config.get("retrain", False)).lower() == "true":
    shutil.rmtree(p.work_dir, ignore_errors=True)
with open(snakemake.log[0], "w") as log:
    run_cell(
        FLConfig.from_preset(p.preset, w.dataset),
        MethodSpec.from_config(w.method, p.method),
        w.dataset,
        p.data_root,
        snakemake.input.partition,
        int(w.seed),
        out_dir=snakemake.output.metrics.rsplit("/", 1)[0],
        work_dir=p.work_dir,
        tracking=tracking,
        threads=snakemake.threads,
        progress=log,
        stages={k.removeprefix("stage_"): v for k, v in snakemake.input.items() if k.startswith("stage_")},
    )
