#!/usr/bin/env bash
# The GPU checks a lent machine owes after its campaign (issue 41): one call, ≈ 4 minutes on an H200, ≤ 7 with
# FedMix's steps.
#
#   here:   the cache and the wheels as scripts/device_prepare.sh makes them (data/fmnist/tensors.pt.xz, .whl/)
#   there:  bash scripts/device_checks.sh    (the device tool's run, carrying data/fmnist/tensors.pt.xz and .whl)
#
# 1. the GPU tests (tests/test_gpu.py; the DP-CGAN's GPU-vs-CPU draw in float64 since 2026-11-27, not yet run there);
# 2. a batched round with BatchNorm on CUDA (Fed-ZDA's, which failed on an H200 before fed.batched._stack; MOON's
#    second round, whose stacked previous models failed there before f5e6997; both ran there on 2026-11-30) and
#    DA-FL's, each against the loop, with deterministic kernels and without (`deterministic: false`, TF32 still off);
#    3. Opacus' per-sample-gradient modes on CUDA, warmed and alternated;
# 4. FedMix's round (203 s batched on an H200 at E = 5, FedProx's ≈ 16 s; on one CPU thread its batched round is
#    0.95x the loop, with no vmap fallback: docs/results/performance.md): one epoch against the loop, with and without
#    deterministic kernels, to tell a slow deterministic kernel (its input gradient's double backward) from the rest.
# Each step has its own time limit; the logs land in $OUT.
set -uo pipefail
out=${OUT:-/tmp/device_checks_out}
mkdir -p "$out"
source "$(dirname "$0")/device_env.sh"  # caches, wheels, PYTHONPATH
step() {  # NAME SECONDS COMMAND...: run with a limit, keep the log, print its tail
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "== $name: exit $?"
  grep -v "Warning\|backward()" "$out/$name.log" | tail -n 6
}
step gpu_tests 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py
step batched_fedzda 60 python3 benchmarks/batched_round.py --only fedzda --rounds 1 --device cuda
step batched_moon 120 python3 benchmarks/batched_round.py --only dpms --method moon --rounds 3 --device cuda --nondeterministic
step batched_dafl 60 python3 benchmarks/batched_round.py --only dafl --rounds 2 --device cuda
step batched_dafl_fast 60 python3 benchmarks/batched_round.py --only dafl --rounds 2 --device cuda --nondeterministic
step dp_modes 60 python3 benchmarks/dp_modes.py --steps 8 --repeats 2 --device cuda
step fedmix 90 python3 benchmarks/batched_round.py --only dafl --rounds 1 --device cuda --method fedmix
step fedmix_fast 90 python3 benchmarks/batched_round.py --only dafl --rounds 1 --device cuda --method fedmix --nondeterministic
