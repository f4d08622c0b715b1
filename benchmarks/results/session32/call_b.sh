# Session 32, device call B (261 s on one H100), main's defaults at 5bfc59a's package (SPLIT_FAR off):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session32/call_b.sh > $OUT/call_b.log 2>&1
# every GPU test (six workers), and beside them the zoo's training rows of six models with our
# backend only, each model in its own process (three at a time), judged against eager.
nvidia-smi -L
OUT=$OUT/zoo TEST_WORKERS=6 TESTS_TIMEOUT=300 GPU_TESTS="$(cat scripts/gpu_tests.txt) tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py" \
  ZOO_MODELS=vit_s16,gpt2,llama,t5,bert,efficientnet_b0 ZOO_MODES=train ZOO_BACKENDS=nvfuser_dtensor ZOO_JOBS=3 ZOO_TIMEOUT=330 \
  OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout 360 bash scripts/gpu_zoo_own_graphs.sh
