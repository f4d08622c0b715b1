# Prepared in session 32 for the next device session's first call (about 580 s):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session32/next_session.sh > $OUT/next_session.log 2>&1
# NVFUSER_DTENSOR_SPLIT_FAR=1 now joins neither copies alone nor reductions (Note [Parts of a
# region far apart]); session 32 measured it with both joins on (ViT-S/16's kernels 4.46 ->
# 4.77 ms, BERT's 7.37 -> 7.54, one H100). This call says whether it can be the default:
# 1. every GPU test with the switch on, and beside them the zoo's training rows of ViT-S/16,
#    T5, BERT and Llama, our backend only, main's defaults and the switch on side by side, each
#    model in its own process (first call, reserved memory, rows right; kernel times rough);
# 2. then, nothing else on the GPU, ViT-S/16's and BERT's training kernels, one process per arm:
#    main's defaults, NVFUSER_DTENSOR_STAGED_COLUMN_SUMS=1 (Note [Column sums in two stages],
#    new in session 32, never run on a GPU) and, for ViT-S/16, the far-apart cut.
nvidia-smi -L
OUT=$OUT/zoo ZOO_MODELS=vit_s16,t5,bert,llama ZOO_MODES=train ZOO_BACKENDS=nvfuser_dtensor ZOO_JOBS=4 ZOO_TIMEOUT=300 \
  ARM_MODELS=vit_s16,t5,bert,llama ARM_ENV=NVFUSER_DTENSOR_SPLIT_FAR=1 ARM_JOBS=4 GPU_TESTS=none \
  OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout 320 bash scripts/gpu_zoo_own_graphs.sh > $OUT/zoo.log 2>&1 &
NVFUSER_DTENSOR_SPLIT_FAR=1 timeout -s INT -k 20 280 python3 -m pytest -v -p no:cacheprovider -rfEs --tb=short -n 6 $(cat scripts/gpu_tests.txt) \
  tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py > $OUT/gpu_tests_split_far.log 2>&1
echo "== GPU tests, NVFUSER_DTENSOR_SPLIT_FAR=1"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tests_split_far.log | tail -12
wait
grep -vE "Warning|warn\(" $OUT/zoo.log | grep -E "^\|" | cut -c1-300
for run in vit_s16:NONE=0 vit_s16:STAGED_COLUMN_SUMS=1 vit_s16:SPLIT_FAR=1 bert:NONE=0 bert:STAGED_COLUMN_SUMS=1; do
  m=${run%%:*}; arm=${run#*:}
  echo "== $m train kernels, NVFUSER_DTENSOR_$arm"
  env NVFUSER_DTENSOR_$arm timeout 90 python3 scripts/gpu_top_kernels.py $m --backends nvfuser_dtensor --top 14 > $OUT/top_${m}_${arm%=*}.log 2>&1
  grep -vE "Warning|warn\(" $OUT/top_${m}_${arm%=*}.log | grep -A14 "^==" | cut -c1-170
done
