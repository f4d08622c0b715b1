# Session 36's second device call (about 520 s), on the package of 6e4eb0b:
#   source .device/setup.sh && bash benchmarks/results/session36/call_b.sh > $OUT/call_b.log 2>&1
# 1. the zoo's training rows, every model in its own process (13 compiling at once, timed one
#    at a time), against inductor and reduce-overhead: goal 4a at the final package, and goal 5's
#    reserved memory; beside it the language models with NVFUSER_DTENSOR_MIN_LAUNCHES=1 (call A:
#    GPT-2's step 7.36 -> 6.79 ms with its one-region loss graphs captured);
# 2. the tiny bias+gelu's call overhead, by default and with NVFUSER_DTENSOR_MIN_LAUNCHES=1 (a
#    one-launch graph captured).
OUT=$OUT ZOO_MODES=train ZOO_JOBS=13 GPU_TESTS=none ZOO_TIMEOUT=${ZOO_S:-430} OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 \
  ARM_MODELS=${ARM_MODELS:-gpt2,llama,qwen2,mistral,phi} ARM_ENV=NVFUSER_DTENSOR_MIN_LAUNCHES=1 ARM_JOBS=${ARM_JOBS:-3} \
  bash scripts/gpu_zoo_own_graphs.sh
for min in 3 1; do
  echo "== call overhead, NVFUSER_DTENSOR_MIN_LAUNCHES=$min"
  NVFUSER_DTENSOR_MIN_LAUNCHES=$min timeout 45 python3 scripts/gpu_call_overhead.py --calls 300 --backends eager,nvfuser_dtensor 2>&1 | grep -E "us/call"
done
