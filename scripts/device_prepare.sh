#!/usr/bin/env bash
# Here, before a lent GPU's call: everything scripts/device_campaign.sh needs there, in one command.
#
#   printf 'presets:\n  feddpms:\n    vectorise: true\n    deterministic: false\n' > gpu.yaml
#   bash scripts/device_prepare.sh .gpu/plan.json config/feddpms_fmnist.yaml+gpu.yaml --partition dir0.5 \
#     --method fedavg --method feddpms
#
# 1. the plan (`fed campaign CONFIGS [--table|--method|--partition …] --write-plan PLAN`);
# 2. the dataset caches its cells read, prepared here from local files (`fed prepare --no-download`) and compressed
#    with xz, Python's lzma (Fashion-MNIST: 55 MB → 26 MB; gzip's 31 MB no longer fits beside the tracked files under
#    the tool's 64 MiB), then the plan again, without their data jobs;
# 3. the wheels the device lacks, for its Python (cp312): Opacus (DA-FL's GAN stages), dp-accounting and its dm-tree
#    (FedDPMS' noise) in .whl/; FED_NO_WHEELS=1 skips them (a plan without DA-FL or FedDPMS, or wheels already there);
# 4. prints the device tool's `carry` list and its command, and what to move aside for the call when the tracked
#    files and the carried paths together pass the tool's 64 MiB (the campaign there reads no reference/ cells).
#    PLAN's folder, .whl/ and the caches are kept out of git (.git/info/exclude): they travel by `carry`, not as
#    untracked files.
set -euo pipefail
plan=${1:?usage: device_prepare.sh PLAN CONFIGS [--table T] [--method M] [--partition P] ...}
shift
python=${PYTHON:-python3}
mkdir -p "$(dirname "$plan")" "$(git rev-parse --git-dir)/info"
exclude="$(git rev-parse --git-dir)/info/exclude"
for path in "/$(dirname "$plan")/" /.whl/; do
  [ "$path" = "/./" ] || grep -qxF "$path" "$exclude" 2>/dev/null || echo "$path" >> "$exclude"
done
"$python" -m fed campaign "$@" --write-plan "$plan"
datasets=$("$python" - "$plan" <<'EOF'
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
print(" ".join(sorted({j["args"]["dataset"] for j in jobs if "dataset" in j["args"]})))
EOF
)
carry=("$plan")
for ds in $datasets; do
  "$python" -m fed prepare "$ds" --no-download
  "$python" -c 'import lzma, shutil, sys
with open(sys.argv[1], "rb") as src, lzma.open(sys.argv[1] + ".xz", "wb") as dst: shutil.copyfileobj(src, dst)' \
    "data/$ds/tensors.pt"
  carry+=("data/$ds/tensors.pt.xz")
done
[ -n "$datasets" ] && "$python" -m fed campaign "$@" --write-plan "$plan"  # the caches exist now: no data jobs
if [ "${FED_NO_WHEELS:-0}" != 1 ]; then
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    opacus==1.6.0 dp-accounting==0.6.0 dm-tree==0.1.10
  carry+=(.whl)
fi
# what the tool sends: tracked files, untracked files git does not ignore, and the carried paths, 64 MiB at most
# counted as space on disk (by bytes alone a 61 MiB call was refused, 2026-12-04)
sent=$( { git ls-files -z --cached --others --exclude-standard; printf '%s\0' "${carry[@]}"; } |
  xargs -0 -r du -s -B1 2>/dev/null | awk '{s += $1} END {print s + 0}')
if [ "$sent" -gt $((64 * 2**20)) ]; then
  echo "device_prepare: the call would send $((sent / 2**20)) MiB, over the device tool's 64 MiB; the campaign there" \
    "needs no committed cells: for the call, move the largest aside (and back after it):"
  du -s -B1 reference/* 2>/dev/null | sort -rn | head -3 | awk '{printf "  mv %s /tmp/  # %.1f MiB\n", $2, $1 / 2^20}'
fi
printf 'carry: ['; printf '"%s", ' "${carry[@]}" | sed 's/, $//'; printf ']\n'
echo "run:   bash scripts/device_campaign.sh $plan MINUTES JOBS THREADS"
