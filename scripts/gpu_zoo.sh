#!/usr/bin/env bash
# The GPU session for issue 12, on the device machine after `source .device/setup.sh`:
# the model zoo on the H200 (bf16, real sizes; eager, inductor, nvfuser_dtensor; every model in
# its own process, ZOO_JOBS at once), the standalone nvFuser fault repros, and a Llama training
# step with the layout check on (a region whose output strides differ from aten's raises,
# naming the region), and the GPU layout/translator tests. Logs and results under $OUT.
#   ZOO_ARGS="--backends eager,inductor,nvfuser_dtensor,nvfuser_dtensor:fuse_matmul" adds fuse_matmul.
#   ZOO2_MODELS="vit_s16 t5" ZOO2_BACKENDS=nvfuser_dtensor:fuse_matmul: a second zoo for a few models
#   (results under $out/logs/h200_models_2). VERIFY_MODELS="convnext": a training step of each
#   with options.verify (scripts/gpu_verify_regions.py), naming the regions nvFuser gets wrong.
set -uo pipefail
out="${OUT:-/tmp/gpu-zoo}"; mkdir -p "$out/logs"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation . > "$out/logs/install.log" 2>&1 || { tail -20 "$out/logs/install.log"; exit 1; }
timeout 240 python3 -m tools.nvfuser_repros > "$out/logs/repros.log" 2>&1 &
NVFUSER_DTENSOR_CHECK_LAYOUTS=1 timeout 300 python3 scripts/gpu_fault_probe.py llama --steps 1 > "$out/logs/llama_layouts.log" 2>&1 &
# The layout and translator tests on CUDA (the layout check is on in the suite): GPU_TESTS=0 skips.
if [ "${GPU_TESTS:-1}" = 1 ]; then
  timeout "${GPU_TESTS_TIMEOUT:-400}" python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_layouts.py tests/test_layouts.py \
    tests/translators/test_linalg.py tests/translators/test_shape.py tests/test_verify.py tests/test_cuda_graphs.py > "$out/logs/gpu_tests.log" 2>&1 &
fi
for m in ${VERIFY_MODELS:-}; do
  timeout "${ZOO_TIMEOUT:-420}" python3 scripts/gpu_verify_regions.py "$m" > "$out/logs/verify_$m.log" 2>&1 &
done
if [ -n "${ZOO2_MODELS:-}" ]; then
  timeout "${ZOO_TIMEOUT:-420}" python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real \
    --models "$(echo $ZOO2_MODELS | tr ' ' ,)" --backends "${ZOO2_BACKENDS:-nvfuser_dtensor:fuse_matmul}" \
    --jobs 4 --timeout-s "${ZOO_MODEL_TIMEOUT:-400}" --warmup 3 --iters 10 --out "$out/logs/h200_models_2" \
    > "$out/logs/zoo2.log" 2>&1 &
fi
timeout "${ZOO_TIMEOUT:-420}" python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real \
  --jobs "${ZOO_JOBS:-13}" --timeout-s "${ZOO_MODEL_TIMEOUT:-400}" --warmup 3 --iters 10 ${ZOO_ARGS:-} \
  --out "$out/h200_models" 2>&1 | tee "$out/logs/zoo.log" | grep -E "^\[" 
wait
echo "== repros"; cat "$out/logs/repros.log"
[ -f "$out/logs/gpu_tests.log" ] && { echo "== GPU tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/logs/gpu_tests.log" | tail -15; }
echo "== llama with the layout check"; grep -E "loss_err|LayoutContract|Error" "$out/logs/llama_layouts.log" | cut -c1-400 | tail -4
grep -A8 -- "--- <eval_with_key>" "$out/logs/llama_layouts.log" | head -20
for m in ${VERIFY_MODELS:-}; do echo "== verify $m"; grep -vE "^\s*$|Warning: |warnings.warn" "$out/logs/verify_$m.log" | cut -c1-600 | tail -14; done
[ -f "$out/logs/zoo2.log" ] && { echo "== second zoo"; grep -E "^\[" "$out/logs/zoo2.log"; }
tar -czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
