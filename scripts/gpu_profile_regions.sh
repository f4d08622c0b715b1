#!/usr/bin/env bash
# One device call, after `source .device/setup.sh`: training steps alone under the profiler,
# our kernels put on the regions that launched them (scripts/gpu_top_kernels.py --regions),
# then the GPU tests alone (GPU_TESTS, TESTS_TIMEOUT). PROFILE_RUNS lists the profiles, each
# `model|VAR=value[,VAR=value...]|backends` (the variables and the backends may be empty:
# default backends PROFILE_BACKENDS, "inductor,nvfuser_dtensor:no_cuda_graphs"), e.g.
#   PROFILE_RUNS="gpt2|| llama|NVFUSER_DTENSOR_WIDE_ROWS=cut|nvfuser_dtensor:no_cuda_graphs"
# Logs in $OUT/all.tgz; the heads of the tables are printed.
out="${OUT:-/tmp/gpu-profile}"; w="$out/work"
source scripts/gpu_prelude.sh "$w/logs"
i=0
for run in ${PROFILE_RUNS:-gpt2|| llama||}; do
  IFS='|' read -r m var backends <<< "$run"; i=$((i + 1))
  env ${var//,/ } timeout "${PROFILE_TIMEOUT:-150}" python3 scripts/gpu_top_kernels.py "$m" --regions --top "${TOP:-30}" \
    --backends "${backends:-${PROFILE_BACKENDS:-inductor,nvfuser_dtensor:no_cuda_graphs}}" > "$w/logs/profile_${i}_$m.log" 2>&1
  echo "$run" > "$w/logs/profile_${i}_$m.run"
done
[ -n "${GPU_TESTS:-}" ] && timeout "${TESTS_TIMEOUT:-380}" python3 -m pytest -q -p no:cacheprovider -rfEs $GPU_TESTS > "$w/logs/gpu_tests.log" 2>&1
tar -czf "$out/all.tgz" -C "$w" .
[ -n "${GPU_TESTS:-}" ] && { echo "== GPU tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$w/logs/gpu_tests.log" | tail -15; }
for f in "$w"/logs/profile_*.log; do
  echo "#### $(cat "${f%.log}.run")"
  cut -c1-200 "$f" | grep -vE "Warning|warn|^\[transformers" | awk '/^(==|--)/{n=0; print; next} {n++; if (n <= 6) print}' | grep -vE "^Traceback" | head -60
done
rm -rf "$w"
