#!/usr/bin/env bash
# One device call, after `source .device/setup.sh`: each model's training step alone under the
# profiler, inductor's kernels next to ours, and ours put on the regions that launched them
# (scripts/gpu_top_kernels.py --regions; PROFILE_MODELS, default "gpt2 llama"), then the GPU
# tests alone (GPU_TESTS, TESTS_TIMEOUT). Logs in $OUT/all.tgz; the tables are printed.
out="${OUT:-/tmp/gpu-profile}"; w="$out/work"
source scripts/gpu_prelude.sh "$w/logs"
for m in ${PROFILE_MODELS:-gpt2 llama}; do
  timeout "${PROFILE_TIMEOUT:-150}" python3 scripts/gpu_top_kernels.py "$m" --regions --top "${TOP:-30}" \
    --backends "${PROFILE_BACKENDS:-inductor,nvfuser_dtensor:no_cuda_graphs}" > "$w/logs/profile_$m.log" 2>&1
done
[ -n "${GPU_TESTS:-}" ] && timeout "${TESTS_TIMEOUT:-380}" python3 -m pytest -q -p no:cacheprovider -rfEs $GPU_TESTS > "$w/logs/gpu_tests.log" 2>&1
tar -czf "$out/all.tgz" -C "$w" .
[ -n "${GPU_TESTS:-}" ] && { echo "== GPU tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$w/logs/gpu_tests.log" | tail -15; }
for m in ${PROFILE_MODELS:-gpt2 llama}; do echo "== profile $m"; cut -c1-230 "$w/logs/profile_$m.log" | grep -vE "Warning|warn" | tail -60; done
rm -rf "$w"
