#!/usr/bin/env bash
# Lent against copied forward outputs (Note [CUDA graphs of our own], issue 13 goal 4b), one
# device call (about 6 minutes), after `source .device/setup.sh`: the training steps of
# LEND_MODELS (default gpt2,llama) against inductor and its reduce-overhead mode, then ours
# again with every user output copied out (NVFUSER_DTENSOR_LEND_FROM_BYTES huge). Two model
# processes at a time (LEND_JOBS); results under $OUT/lend and $OUT/copy.
out="${OUT:-/tmp/gpu-lend-ab}"
source scripts/gpu_prelude.sh "$out/logs"
models="${LEND_MODELS:-gpt2,llama}"
zoo() {  # ARM BACKENDS TIMEOUT [ENV...]
  local arm="$1" backends="$2" t="$3"; shift 3
  env "$@" timeout "$t" python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real \
    --jobs "${LEND_JOBS:-2}" --models "$models" --modes train --timeout-s "$((t - 10))" --warmup 3 --iters 10 \
    --backends "$backends" --out "$out/$arm" > "$out/logs/zoo_$arm.log" 2>&1
  echo "== $arm"; python3 scripts/zoo_table.py "$out/$arm/results.json" | grep -E "^\| (model|[a-z])" | cut -c1-300
}
zoo lend inductor,inductor:reduce-overhead,nvfuser_dtensor "${LEND_TIMEOUT:-230}"
zoo copy nvfuser_dtensor "${COPY_TIMEOUT:-120}" NVFUSER_DTENSOR_LEND_FROM_BYTES=1000000000000000
