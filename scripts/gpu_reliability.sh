#!/usr/bin/env bash
# Issue 6's GPU runs (after `source .device/setup.sh` and an install, e.g. by gpu_check.sh):
# the full OpInfo sweep on CUDA and a long fuzzer run; results under $OUT (or /tmp/gpu-rel).
#   bash scripts/gpu_reliability.sh
set -uo pipefail
out="${OUT:-/tmp/gpu-rel}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
timeout "${SWEEP_TIMEOUT:-300}" python3 -m tools.op_coverage --device cuda --samples 3 \
  --out "$out/op_coverage.md" --json "$out/op_coverage.json" > "$out/op_coverage.log" 2>&1
tail -c 400 "$out/op_coverage.log"; echo
timeout "${FUZZ_TIMEOUT:-200}" python3 -m tools.fuzz --device cuda --seeds "${FUZZ_SEEDS:-0:500}" 2>&1 \
  | grep -v Warning | tee "$out/fuzz.log" | tail -30
