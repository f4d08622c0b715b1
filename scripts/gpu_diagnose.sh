#!/usr/bin/env bash
# Root causes on the H200, on the device machine after `source .device/setup.sh` (about 8
# minutes, all at once, each model in its own process): ConvNeXt's wrong training gradients
# (scripts/gpu_bisect_regions.py: which region, run alone in nvFuser, makes the step wrong),
# Qwen2's fault (the standalone repros of its loss-backward region, then its training step
# with the >65536-class guard lifted, traced and blocking so the last region printed is the
# one that faulted), the kernels of a step per backend (DIAG_TOP), CUDA graphs against inductor's reduce-overhead on a few models
# (DIAG_ZOO_MODELS), and the GPU tests (DIAG_TESTS). Logs under $OUT/logs.tgz.
set -uo pipefail
out="${OUT:-/tmp/gpu-diagnose}"; mkdir -p "$out/logs"
log="$out/logs"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation . > "$log/install.log" 2>&1 || { tail -20 "$log/install.log"; exit 1; }
t="${DIAG_TIMEOUT:-480}"
( for c in ${DIAG_REPROS-qwen2_loss_backward_32000 qwen2_loss_backward qwen2_loss_forward_masked_sum_32000 qwen2_loss_forward_masked_sum}; do
    timeout 120 python3 -m tools.nvfuser_repros --case "$c" > "$log/repro_$c.log" 2>&1; echo "exit $?" >> "$log/repro_$c.log"
    if grep -qE "CUDA error|illegal|misaligned|unspecified launch" "$log/repro_$c.log" && command -v compute-sanitizer > /dev/null; then
      timeout 200 compute-sanitizer --tool memcheck --print-limit 10 python3 -m tools.nvfuser_repros --case "$c" > "$log/sanitize_$c.log" 2>&1
    fi
  done ) &
[ "${DIAG_QWEN2:-1}" = 1 ] && ( NVFUSER_DTENSOR_MAX_CLASSES=1000000 timeout 240 python3 scripts/gpu_verify_regions.py qwen2 --options '{"verify": false}' > "$log/qwen2_unguarded.log" 2>&1
  if grep -qE "CUDA error|illegal|misaligned|unspecified launch" "$log/qwen2_unguarded.log"; then
    NVFUSER_DTENSOR_MAX_CLASSES=1000000 CUDA_LAUNCH_BLOCKING=1 NVFUSER_DTENSOR_TRACE=1 timeout 200 \
      python3 scripts/gpu_verify_regions.py qwen2 --options "{\"verify\": false, \"dump_dir\": \"$log/dump-qwen2\"}" > "$log/qwen2_blocking.log" 2>&1
  fi ) &
for m in ${DIAG_BISECT:-convnext}; do
  timeout "$t" python3 scripts/gpu_bisect_regions.py "$m" > "$log/bisect_$m.log" 2>&1 &
done
for m in ${DIAG_TOP-gpt2}; do
  timeout "$t" python3 scripts/gpu_top_kernels.py "$m" > "$log/top_$m.log" 2>&1 &
done
if [ -n "${DIAG_TESTS-tests/test_cuda_graphs.py tests/test_verify.py tests/test_gpu_layouts.py}" ]; then
  timeout "$t" python3 -m pytest -q -p no:cacheprovider -rfE ${DIAG_TESTS-tests/test_cuda_graphs.py tests/test_verify.py tests/test_gpu_layouts.py} \
    > "$log/gpu_tests.log" 2>&1 &
fi
if [ -n "${DIAG_ZOO_MODELS-gpt2 llama vit_s16 resnet18}" ]; then
  timeout "$t" python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real \
    --models "$(echo ${DIAG_ZOO_MODELS-gpt2 llama vit_s16 resnet18} | tr ' ' ,)" --modes train \
    --backends "${DIAG_BACKENDS:-eager,inductor,inductor:reduce-overhead,nvfuser_dtensor,nvfuser_dtensor:cuda_graphs}" \
    --jobs 4 --timeout-s "$((t - 20))" --warmup 3 --iters 10 --out "$out/h200_cuda_graphs" > "$log/zoo.log" 2>&1 &
fi
wait
for f in "$log"/repro_*.log; do echo "== $(basename "$f")"; tail -3 "$f" | cut -c1-400; done
for f in "$log"/sanitize_*.log; do [ -f "$f" ] && { echo "== $(basename "$f")"; grep -E "Invalid|of size|at 0x|ERROR SUMMARY|Saved host backtrace" "$f" | head -12 | cut -c1-300; }; done
for m in ${DIAG_TOP-gpt2}; do echo "== top kernels $m"; grep -E "^==|^  " "$log/top_$m.log" | cut -c1-200; done
[ -f "$log/qwen2_unguarded.log" ] && echo "== qwen2 unguarded"; grep -E "qwen2 train|Error|error" "$log/qwen2_unguarded.log" 2>/dev/null | tail -4 | cut -c1-400
[ -f "$log/qwen2_blocking.log" ] && { echo "== qwen2 blocking"; grep -E "trace\]|CUDA error" "$log/qwen2_blocking.log" | tail -3 | cut -c1-1500; }
for m in ${DIAG_BISECT:-convnext}; do echo "== bisect $m"; grep -vE "^\s*$|Warning|warnings.warn|evaluator" "$log/bisect_$m.log" | tail -70 | cut -c1-1500; done
[ -f "$log/gpu_tests.log" ] && { echo "== GPU tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$log/gpu_tests.log" | tail -15 | cut -c1-400; }
[ -f "$log/zoo.log" ] && { echo "== zoo"; grep -E "^\[" "$log/zoo.log"; cat "$out/h200_cuda_graphs/summary.md" 2>/dev/null | head -40; }
tar -czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
