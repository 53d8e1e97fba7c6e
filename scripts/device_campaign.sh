#!/usr/bin/env bash
# A lent GPU's minutes on the cells we miss: run a campaign plan written here, bring the finished cells back.
#
#   here:   python -m fed campaign config/dafl_fmnist.yaml+config/dafl_fmnist_column.yaml --write-plan campaign.json
#           python -m fed prepare fmnist --no-download          # data/fmnist/tensors.pt, which the plan names
#           echo /.whl/ >> .git/info/exclude && python3 -m pip download --no-deps --only-binary=:all: \
#             --python-version 3.12 --implementation cp --platform manylinux2014_x86_64 -d .whl \
#             opacus==1.6.0 dp-accounting==0.6.0
#   there:  bash scripts/device_campaign.sh campaign.json 8 4 4   # PLAN MINUTES [JOBS] [THREADS]
#           (the device tool's run, carrying data/fmnist and .whl)
#   back:   tar xzf <files_at>/runs.tgz && python -m fed export-reference results reference/dafl_fmnist
#
# The device has PyTorch and no network (no Snakemake, MLflow, Opacus or dp-accounting): the wheels in .whl/ (Opacus
# for DA-FL's GAN stages, dp-accounting for FedDPMS' noise; their own dependencies are there) are installed first.
# At MINUTES every running cell checkpoints after its round. A machine keeps results/ only while it stays warm (the
# tool gives it back after a short idle time): a call on it then resumes those cells, a fresh machine starts them
# again. $OUT/runs.tgz holds every finished cell's metrics.json and history.csv and the jobs' logs (never weights),
# $OUT/campaign.log the campaign's own log.
set -euo pipefail
plan=${1:?usage: device_campaign.sh PLAN MINUTES [JOBS] [THREADS]}
minutes=${2:?usage: device_campaign.sh PLAN MINUTES [JOBS] [THREADS]}
jobs=${3:-4}
threads=${4:-4}
out=${OUT:-/tmp/device_campaign_out}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
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
find results/runs logs/campaign \( -name metrics.json -o -name history.csv -o -name '*.log' \) -print0 2>/dev/null |
  tar czf "$out/runs.tgz" --null -T -
exit "$status"
