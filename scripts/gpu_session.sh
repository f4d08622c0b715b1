#!/usr/bin/env bash
# One device call for a whole GPU session (after `source .device/setup.sh`): the test suite on
# CUDA (scripts/gpu_check.sh), the tensor-parallel runs (scripts/gpu_tp.sh) and, with
# GPU_RELIABILITY=1, issue 6's sweep and fuzzer (scripts/gpu_reliability.sh). Every log goes
# into one archive, $OUT/gpu-logs.tgz (a device call brings back at most 8 files).
#   GPU_PARALLEL=6 bash scripts/gpu_session.sh
#   GPU_SUITE=0 TP_CASES=1 TP_BENCH=0 GPU_RELIABILITY=1 bash scripts/gpu_session.sh  # no suite, no benchmarks
set -uo pipefail
final="${OUT:-/tmp}"
work=/tmp/gpu-session; rm -rf "$work"; mkdir -p "$work"
export OUT="$work/check"; mkdir -p "$OUT"
GPU_BENCH="${GPU_BENCH:-0}" bash scripts/gpu_check.sh
# The suite ran every TP case on the GPU already; the per-case runs (with a cuda-gdb
# backtrace of a crash) only when that test failed.
tp_cases=0; grep -qE "^(FAILED|ERROR) tests/distributed/test_tensor_parallel" "$work"/check/pytest*.log && tp_cases=1
# The reliability runs (many CPU-bound processes) go alongside the TP runs (one rank per GPU).
if [ "${GPU_RELIABILITY:-0}" = 1 ]; then
  mkdir -p "$work/reliability"
  OUT="$work/reliability" bash scripts/gpu_reliability.sh > "$work/reliability/summary.log" 2>&1 &
fi
export OUT="$work/tp"; mkdir -p "$OUT"
TP_CASES="${TP_CASES:-$tp_cases}" bash scripts/gpu_tp.sh
wait
[ "${GPU_RELIABILITY:-0}" = 1 ] && cat "$work/reliability/summary.log"
tar czf "$final/gpu-logs.tgz" -C "$work" .
echo "logs: $final/gpu-logs.tgz"
