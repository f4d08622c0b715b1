#!/usr/bin/env bash
# After `source .device/setup.sh`: what option kernel_cache (Note [Kernel cache across
# processes]) does to a first call. For each of KC_MODELS (default gpt2,llama), one training
# run per process, one after another: without the cache, with an empty one (cold: it fills it,
# segments compiled one after another), and again (warm: NVRTC skipped). Models run side by
# side, each with a folder of its own; the three arms of one model never overlap. Prints each
# run's step and first call and where it went (scripts/zoo_table.py), and how many kernels the
# cache holds. On the CPU (KC_DEVICE=cpu KC_SIZE=tiny GPU_PRELUDE_DONE=1) only the plumbing runs:
# the evaluator compiles nothing.
out="${OUT:-/tmp/gpu-kernel-cache}/kernel_cache"
source scripts/gpu_prelude.sh "$out/logs"
arm() {  # model arm [cache folder]
  ${3:+env NVFUSER_DTENSOR_KERNEL_CACHE=$3} timeout "${KC_TIMEOUT:-200}" python3 -m benchmarks.models --device "${KC_DEVICE:-cuda}" \
    --dtype bfloat16 --size "${KC_SIZE:-real}" --models "$1" --modes train --backends nvfuser_dtensor --warmup 1 --iters 3 \
    --timeout-s "$(( ${KC_TIMEOUT:-200} - 10 ))" --out "$out/$1_$2" > "$out/logs/$1_$2.log" 2>&1
}
for m in ${KC_MODELS:-gpt2 llama}; do
  (arm "$m" off; arm "$m" cold "$out/cache_$m"; arm "$m" warm "$out/cache_$m") &
done
wait
for m in ${KC_MODELS:-gpt2 llama}; do
  for a in off cold warm; do
    echo "#### $m $a"
    python3 scripts/zoo_table.py "$out/${m}_$a/results.json" 2>&1 | grep -v '^$'
  done
  echo "kernels kept: $(find "$out/cache_$m" -name db.csv -exec cat {} + 2>/dev/null | grep -vc '^kernel_signature')"
done
