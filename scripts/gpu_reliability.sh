#!/usr/bin/env bash
# Issue 6's GPU runs (after `source .device/setup.sh` and an install, e.g. by gpu_check.sh):
# the full OpInfo sweep on CUDA and a long fuzzer run, each spread over parallel processes
# (compiling is CPU work; the machine has 16 cores); results under $OUT (or /tmp/gpu-rel).
#   bash scripts/gpu_reliability.sh       # SWEEP_PARTS=8 FUZZ_PARTS=4 FUZZ_SEEDS=0:800
set -uo pipefail
out="${OUT:-/tmp/gpu-rel}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
parts="${SWEEP_PARTS:-8}"; fparts="${FUZZ_PARTS:-4}"
for k in $(seq 0 $((parts - 1))); do
  timeout "${SWEEP_TIMEOUT:-300}" python3 -m tools.op_coverage --device cuda --samples 3 --shard "$k/$parts" \
    --out - --json "$out/op_coverage-$k.json" > "$out/op_coverage-$k.log" 2>&1 &
done
IFS=: read -r first last <<< "${FUZZ_SEEDS:-0:800}"
step=$(( (last - first + fparts - 1) / fparts ))
for k in $(seq 0 $((fparts - 1))); do
  a=$((first + k * step)); b=$((a + step < last ? a + step : last))
  timeout "${FUZZ_TIMEOUT:-300}" python3 -m tools.fuzz --device cuda --seeds "$a:$b" > "$out/fuzz-$k.log" 2>&1 &
done
wait
python3 -m tools.op_coverage --merge "$out"/op_coverage-*.json --out "$out/op_coverage.md" --json "$out/op_coverage.json"
for k in $(seq 0 $((parts - 1))); do [ -f "$out/op_coverage-$k.json" ] || { echo "sweep part $k did not finish:"; tail -c 300 "$out/op_coverage-$k.log"; }; done
for k in $(seq 0 $((fparts - 1))); do echo "== fuzz part $k"; grep -v Warning "$out/fuzz-$k.log" | tail -8; done
