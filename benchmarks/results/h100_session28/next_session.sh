# The next device session's first call, prepared in session 28 (run from the project root):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/h100_session28/next_session.sh
# 1. every GPU test and the zoo's bert_dropout training and vision inference at the tree of
#    session 28 (its last calls got no machine: the dropout and channels-last defaults ran
#    on the GPU only as session 28's calls 1-2 ran them, before they were the defaults);
# 2. where ViT-S/16's, Llama's and bert_dropout's training kernels lose to inductor's, one
#    model at a time (goal 4's kernels-alone targets; bert_dropout's five aten copies of
#    about 70 us each, which the CPU graphs do not show: --regions names the aten op that
#    launched each kernel outside the regions).
nvidia-smi -L
OUT=$OUT/zoo TEST_WORKERS=6 TESTS_TIMEOUT=330 GPU_TESTS="$(cat scripts/gpu_tests.txt) tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py" \
  ZOO_MODELS=bert_dropout,gpt2,resnet18 ZOO_MODES=train ZOO_BACKENDS=inductor,nvfuser_dtensor ZOO_JOBS=3 ZOO_TIMEOUT=330 \
  ARM_MODELS=resnet18,vit_s16,convnext ARM_MODES=infer ARM_BACKENDS=inductor,nvfuser_dtensor ARM_JOBS=3 \
  OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout 350 bash scripts/gpu_zoo_own_graphs.sh
for m in vit_s16 llama; do
  timeout 100 python3 scripts/gpu_top_kernels.py $m --backends inductor,nvfuser_dtensor --top 30 > $OUT/top_$m.log 2>&1
  grep "GPU activities" $OUT/top_$m.log
done
timeout 100 python3 scripts/gpu_top_kernels.py bert_dropout --backends nvfuser_dtensor:no_cuda_graphs --regions --top 30 > $OUT/regions_bert_dropout.log 2>&1
grep -i "copy" $OUT/regions_bert_dropout.log | head -20
