# Session 30, device call 3, at the tree with the two new defaults (tangents read in place,
# `_to_copy` counted as compute), every log under $OUT:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session30/call3.sh > $OUT/call3.log 2>&1
# every GPU test, the zoo's six language/vision training rows with our backend (each model in
# its own process, judged against eager), then Llama's kernels, inductor against ours, in one process.
nvidia-smi -L
OUT=$OUT/zoo TEST_WORKERS=6 TESTS_TIMEOUT=330 GPU_TESTS="$(cat scripts/gpu_tests.txt) tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py" \
  ZOO_MODELS=llama,gpt2,bert_dropout,t5,roberta,vit_s16 ZOO_MODES=train ZOO_BACKENDS=nvfuser_dtensor ZOO_JOBS=3 ZOO_TIMEOUT=330 \
  OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout 350 bash scripts/gpu_zoo_own_graphs.sh
timeout 110 python3 scripts/gpu_top_kernels.py llama --backends inductor,nvfuser_dtensor --top 10 > $OUT/top_llama.log 2>&1
grep -H "GPU activities\|Memcpy" $OUT/top_llama.log | cut -c1-160
