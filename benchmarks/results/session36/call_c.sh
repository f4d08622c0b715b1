# Session 36's third device call (about 430 s), on the package with training pairs captured
# from one kernel launch on (cuda_graphs.MIN_LAUNCHES["training"] = 1):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session36/call_c.sh > $OUT/call_c.log 2>&1
# 1. every GPU test at that default;
# 2. then, nothing else on the GPU, the training rows of GPT-2, Llama, Mistral and BART (the
#    one whose small layer graphs are now captured: memory, goal 5) against reduce-overhead,
#    and beside them Llama and BART with NVFUSER_DTENSOR_MIN_TRAINING_LAUNCHES=3 (the rule
#    before; call B's Llama arm at 1 measured 8.14 ms against 4.98 beside 13 compiles).
start=$SECONDS
nvidia-smi -L
timeout -s INT -k 20 ${TESTS_S:-225} python3 -m pytest -v -p no:cacheprovider -rfEs --tb=short -n ${WORKERS:-8} $(cat scripts/gpu_tests.txt) \
  tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py > $OUT/gpu_tests.log 2>&1
echo "== GPU tests ($((SECONDS - start)) s)"; grep -E "^(FAILED|ERROR)|passed|failed|no tests" $OUT/gpu_tests.log | tail -12
left=$(( ${DEADLINE_S:-440} - (SECONDS - start) ))
[ "$left" -gt 90 ] && OUT=$OUT/zoo ZOO_MODELS=${ZOO_MODELS:-gpt2,llama,mistral,bart} ZOO_MODES=train ZOO_JOBS=4 GPU_TESTS=none \
  ZOO_BACKENDS=inductor:reduce-overhead,nvfuser_dtensor ZOO_TIMEOUT=$((left - 10)) OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 \
  ARM_MODELS=${ARM_MODELS:-llama,bart} ARM_ENV=NVFUSER_DTENSOR_MIN_TRAINING_LAUNCHES=3 ARM_JOBS=2 \
  timeout $left bash scripts/gpu_zoo_own_graphs.sh
echo "== done ($((SECONDS - start)) s)"
