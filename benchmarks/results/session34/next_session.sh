# Prepared in session 34 for the next device session's first call (about 520 s):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session34/next_session.sh > $OUT/next_session.log 2>&1
# 1. whether torch 2.11 runs the partition proposal on bit masks, and every GPU test at the
#    final package (tests/test_partition_proposal.py compares the copy with torch 2.11's own);
# 2. then, nothing else on the GPU, the training rows of the models short of a goal or whose
#    first calls lean on the partition proposal (T5, ViT-S/16), against inductor and its
#    reduce-overhead mode, each model in its own process: steps, memory, first-call parts.
# (TESTS_S, ZOO_S, ZOO_MODELS: limits and models, for a short budget; SKIP_ZOO=1: part 1 only)
nvidia-smi -L
python3 -c "import torch; from nvfuser_dtensor_backend.partition_proposal import fx_algorithm_copied as f; print('torch', torch.__version__, 'proposal on bit masks:', f())" 2>&1 | tail -1
timeout -s INT -k 20 ${TESTS_S:-250} python3 -m pytest -v -p no:cacheprovider -rfEs --tb=short -n ${WORKERS:-8} $(cat scripts/gpu_tests.txt) \
  tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py > $OUT/gpu_tests.log 2>&1
echo "== GPU tests"; grep -E "^(FAILED|ERROR)|passed|failed|no tests" $OUT/gpu_tests.log | tail -12
if [ "${SKIP_ZOO:-0}" != 1 ]; then
OUT=$OUT/zoo ZOO_MODELS=${ZOO_MODELS:-gpt2,llama,t5,vit_s16,phi} ZOO_MODES=train ZOO_JOBS=${ZOO_JOBS:-5} GPU_TESTS=none \
  ZOO_TIMEOUT=${ZOO_S:-250} OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout $((${ZOO_S:-250} + 20)) bash scripts/gpu_zoo_own_graphs.sh
fi
