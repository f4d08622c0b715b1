#!/usr/bin/env bash
# The three A/Bs that decide defaults of issue 13, in one device call (about 8 minutes), after
# `source .device/setup.sh`. Training steps, every model in its own process; all zoo runs
# share one timing lock, so no timed step shares the GPU (compiles do). ZT bounds each run.
# - channels-last (goals 4a/4c): AB_MODELS with inductor, ours and ours:channels_last;
# - one memory pool per device (goal 5): POOL_MODELS, ours with NVFUSER_DTENSOR_SHARED_POOL=1
#   against ours as it is (read the reserved-MB and replay columns);
# - lent against copied forward outputs (goal 4b): LEND_MODELS with inductor, reduce-overhead
#   and ours, then ours with every output copied (NVFUSER_DTENSOR_LEND_FROM_BYTES huge);
# - GPU_TESTS beside them (default: the lending and siamese tests, not yet run on the H200).
# Results under $OUT/<arm>/ (results.json, summary.md); tables printed at the end.
out="${OUT:-/tmp/gpu-defaults-ab}"
source scripts/gpu_prelude.sh "$out/logs"
zt="${ZT:-420}"
zoo() {  # ARM MODELS BACKENDS JOBS [ENV...]
  local arm="$1" models="$2" backends="$3" jobs="$4"; shift 4
  env "$@" timeout "$zt" python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs "$jobs" \
    --models "$models" --modes train --backends "$backends" --timeout-s "$((zt - 15))" --warmup 3 --iters 10 \
    --timing-lock "$out/timing.lock" --out "$out/$arm" > "$out/logs/zoo_$arm.log" 2>&1
}
zoo nhwc "${AB_MODELS:-resnet18,convnext,efficientnet_b0}" inductor,nvfuser_dtensor,nvfuser_dtensor:channels_last 3 \
  NVFUSER_DTENSOR_CHANNELS_LAST_ON_CUDA=1 &  # off on CUDA otherwise (Note [Channels-last convolutions])
zoo pool "${POOL_MODELS:-bart,t5}" nvfuser_dtensor 2 NVFUSER_DTENSOR_SHARED_POOL=1 &
zoo lend "${LEND_MODELS:-gpt2,llama}" inductor,inductor:reduce-overhead,nvfuser_dtensor 2 &
zoo copy "${LEND_MODELS:-gpt2,llama},${POOL_MODELS:-bart,t5}" nvfuser_dtensor 2 NVFUSER_DTENSOR_LEND_FROM_BYTES=1000000000000000 &
timeout "$((zt - 20))" python3 -m pytest -q -p no:cacheprovider -rfEs ${GPU_TESTS:-tests/test_cuda_graphs.py} \
  > "$out/logs/gpu_tests.log" 2>&1 &
wait
echo "== GPU tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/logs/gpu_tests.log" | tail -12
grep -E "^E  " "$out/logs/gpu_tests.log" | head -20
for arm in nhwc pool lend copy; do
  echo "== $arm"; tail -3 "$out/logs/zoo_$arm.log" | cut -c1-300
  python3 scripts/zoo_table.py "$out/$arm/results.json" | grep -E "^\| " | cut -c1-300
  grep -E "^\| [a-z]" "$out/$arm/summary.md" | grep -v "| ok |" | cut -c1-400
done
echo "== channels-last arm (its plain column: the default arm)"
python3 scripts/zoo_table.py "$out/nhwc/results.json" --ours nvfuser_dtensor:channels_last --plain nvfuser_dtensor \
  | grep -E "^\| " | cut -c1-300
