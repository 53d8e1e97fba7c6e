#!/usr/bin/env bash
# A lent GPU's minutes on the cells we miss: run a campaign plan written here, bring the finished cells back.
#
#   here:   printf 'presets:\n  dafl:\n    vectorise: true\n' > gpu.yaml    # batched clients: 1.48x the loop (H200)
#           bash scripts/device_prepare.sh .gpu/plan.json config/dafl_fmnist.yaml+config/dafl_fmnist_gan_loss.yaml+gpu.yaml
#           # the plan, data/fmnist/tensors.pt.xz (55 MB -> 26 MB), the wheels the device
#           # lacks in .whl/ (Opacus, dp-accounting, its dm-tree; cp312), and the carry list to give the tool
#   there:  bash scripts/device_campaign.sh .gpu/plan.json 8 4 4   # PLAN MINUTES [JOBS] [THREADS]
#           (the device tool's run, carrying what device_prepare.sh printed; on an H200, 8 jobs and
#           5 threads ran 4 FedProx cells at 16 s a round beside 3 GAN stages of 5 clients at once: a 50-round DA-FL
#           cell is ≈ 13 min there, so it finishes in a second call on the warm machine)
#   back:   tar xzf <files_at>/runs.tgz && python -m fed export-reference results reference/dafl_fmnist
#           cat <files_at>/partial.tgz.* | tar xz    # unfinished work, if any: keep it for the next GPU
#           python -m fed campaign --plan .gpu/plan.json --minutes N    # there, at the same commit and THREADS: a
#           # run's identity holds its code, device kind and threads (a GAN client's, its code and device kind), so
#           # a CPU starts a GPU's unfinished cell afresh; a resumed cell records both machines
#
# The device has PyTorch and no network (no Snakemake, MLflow, Opacus or dp-accounting): the wheels in .whl/ (Opacus
# for DA-FL's GAN stages, dp-accounting for FedDPMS' noise; their own dependencies are there) are installed first.
# At MINUTES every running cell checkpoints after its round. A machine keeps results/ only while it stays warm (the
# tool gives it back after a short idle time): a call on it then resumes those cells, a fresh machine starts them
# again. $OUT/runs.tgz holds every finished cell's metrics.json and history.csv, its audit.json (audited tables: the
# campaign audits each cell there, beside its model) and benchmark.tsv, and the jobs' logs (never weights),
# $OUT/campaign.log the campaign's own log. The unfinished work comes back too, as far as the tool's limits allow (8
# files of 16 MiB, 64 MiB in all): $OUT/partial.tgz.0, .1, … (parts of one tar stream, 15 MiB each, 45 MiB in all)
# hold the unfinished cells' work directories (checkpoints), smallest first, then the finished GAN stages and the
# finished clients of unfinished ones; what did not fit is listed in the log. Generators are ≈ 3 MB a DA-FL client.
set -euo pipefail
plan=${1:?usage: device_campaign.sh PLAN MINUTES [JOBS] [THREADS]}
minutes=${2:?usage: device_campaign.sh PLAN MINUTES [JOBS] [THREADS]}
jobs=${3:-4}
threads=${4:-4}
out=${OUT:-/tmp/device_campaign_out}
mkdir -p "$out"
source "$(dirname "$0")/device_env.sh"  # caches, wheels, PYTHONPATH
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv
python3 - <<'EOF'
import importlib.util, torch
found = {name: importlib.util.find_spec(name) is not None for name in ("opacus", "dp_accounting")}
print(f"torch {torch.__version__}, cuda {torch.cuda.is_available()}, {found}")
EOF
status=0
python3 -m fed campaign --plan "$plan" --minutes "$minutes" --jobs "$jobs" --threads "$threads" 2>&1 |
  tee "$out/campaign.log" || status=$?
cells=$(find results/runs -name metrics.json 2>/dev/null | wc -l)
echo "device_campaign: $cells finished cells under results/runs (campaign exit $status)"
find results/runs logs/campaign \( -name metrics.json -o -name history.csv -o -name audit.json -o -name benchmark.tsv \
  -o -name '*.log' \) -print0 2>/dev/null |
  tar czf "$out/runs.tgz" --null -T -
python3 - "$out/partial.list" <<'EOF'
import sys
from pathlib import Path

budget, units = 45 * 2**20, []  # (priority, bytes, files): a unit comes back whole or not at all
for d in sorted({p.parent for p in Path("results/work").rglob("checkpoint.pt")}):
    if "stages" not in d.parts and not (Path("results/runs") / d.relative_to("results/work") / "metrics.json").exists():
        files = [f for f in d.rglob("*") if f.is_file()]
        units.append((0, sum(f.stat().st_size for f in files), files))
units += [(1, f.stat().st_size, [f]) for f in Path("results/stages").rglob("*.pt")]
for f in Path("results/work/stages").rglob("client*.pt"):  # a finished client of a stage that did not finish
    stage = Path("results/stages", *f.parent.parent.relative_to("results/work/stages").parts, f.parent.name + ".pt")
    if "request" not in f.name and not stage.exists():
        units.append((2, f.stat().st_size, [f]))
chosen, left, used = [], [], 0
for _, size, files in sorted(units, key=lambda u: u[:2]):
    fits = used + size <= budget
    (chosen if fits else left).append(files)
    used += size if fits else 0
Path(sys.argv[1]).write_text("".join(f"{f}\n" for files in chosen for f in files))
names = [str(files[0].parent if len(files) > 1 else files[0]) for files in left]
print(f"device_campaign: {len(chosen)} unfinished units ({used / 2**20:.1f} MiB) in partial.tgz.*; left behind: {names}")
EOF
[ -s "$out/partial.list" ] && tar cz -T "$out/partial.list" | split -b 15M -d -a 1 - "$out/partial.tgz."
rm -f "$out/partial.list"
exit "$status"
