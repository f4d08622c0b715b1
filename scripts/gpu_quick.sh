#!/usr/bin/env bash
# A short GPU check (about 2 minutes, for the end of a session's device time), on the device
# machine after `source .device/setup.sh`: Qwen2's training step (real size, the 151936-class
# loss that faulted), ConvNeXt's training step with options.verify (the wrong gradients), and
# the GPU tests of the translators changed last, all at once. Logs under $OUT.
set -uo pipefail
out="${OUT:-/tmp/gpu-quick}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t="${QUICK_TIMEOUT:-120}"
python3 -m pip install -q --no-deps --no-build-isolation . > "$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
timeout "$t" python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --models qwen2 --modes train \
  --backends nvfuser_dtensor --warmup 1 --iters 3 --timeout-s "$t" --out "$out/qwen2" > "$out/qwen2.log" 2>&1 &
timeout "$t" python3 scripts/gpu_verify_regions.py convnext > "$out/convnext.log" 2>&1 &
timeout "$t" python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_layouts.py tests/test_verify.py \
  tests/translators/test_shape.py -k "gqa or verify or slice_scatter or gather or scatter or cross_entropy or offset" \
  > "$out/tests.log" 2>&1 &
wait
echo "== qwen2"; grep -E "^\[|nvfuser_dtensor:|error|Error" "$out/qwen2.log" | cut -c1-400 | tail -6
echo "== convnext (verify)"; grep -vE "^\s*$|warnings.warn" "$out/convnext.log" | cut -c1-500 | tail -10
echo "== tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -12
