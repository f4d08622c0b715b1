# The next device session's first call, prepared in session 29 (run from the project root):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session29/next_session.sh > $OUT/next_session.log 2>&1
# 1. every GPU test and the zoo's bert_dropout / T5 / ViT-S/16 training at session 29's final
#    tree (`cat` counted as compute by default: run on the GPU only as an A/B switch so far),
#    each model in its own process, with an arm of bert_dropout and T5 under
#    NVFUSER_DTENSOR_MOVE_KERNELS=cat,_to_copy (the attention context's cast and transposed copy
#    as one nvFuser kernel: 7.72 -> 7.63 ms of bert_dropout's kernels in session 29, values
#    never checked on a GPU; the zoo judges them). Make `_to_copy` a default if both rows are ok.
# 2. ViT-S/16's kernels with nvFuser's `reuse_zeroed_memory` (its grid reductions' int64
#    semaphores from one zeroed arena per launch instead of one `at::zeros` each: 98
#    FillFunctor<long> kernels, 0.09 ms per step in session 29), against the same run without.
nvidia-smi -L
OUT=$OUT/zoo TEST_WORKERS=6 TESTS_TIMEOUT=330 GPU_TESTS="$(cat scripts/gpu_tests.txt) tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py" \
  ZOO_MODELS=bert_dropout,t5,vit_s16 ZOO_MODES=train ZOO_BACKENDS=inductor,nvfuser_dtensor ZOO_JOBS=3 ZOO_TIMEOUT=330 \
  ARM_MODELS=bert_dropout,t5 ARM_MODES=train ARM_ENV=NVFUSER_DTENSOR_MOVE_KERNELS=cat,_to_copy ARM_BACKENDS=nvfuser_dtensor ARM_JOBS=2 \
  OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout 350 bash scripts/gpu_zoo_own_graphs.sh
timeout 60 python3 scripts/gpu_top_kernels.py vit_s16 --backends nvfuser_dtensor --top 30 > $OUT/top_vit_s16.log 2>&1
NVFUSER_ENABLE=reuse_zeroed_memory timeout 60 python3 scripts/gpu_top_kernels.py vit_s16 --backends nvfuser_dtensor --top 30 > $OUT/top_vit_s16_reuse_zeroed.log 2>&1
grep -H "GPU activities\|FillFunctor<long>\|FillFunctor<unsigned" $OUT/top_vit_s16*.log | cut -c1-160
