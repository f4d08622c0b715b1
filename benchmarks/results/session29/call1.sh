# Session 29's first device call (run from the project root):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session29/call1.sh > $OUT/call1.log 2>&1
# 1. every GPU test and the zoo (bert_dropout / GPT-2 / ResNet-18 training, ResNet-18 / ViT-S/16 /
#    ConvNeXt-T inference, each model in its own process) at the tree of session 28's defaults
#    (dropout drawn by nvFuser, channels-last inference convolutions), which no GPU ran yet;
# 2. ViT-S/16's training kernels against inductor's, then with `NVFUSER_DTENSOR_MOVE_KERNELS=cat`
#    (the qkv gradient's stack as one nvFuser kernel: 4.70 -> 4.58 ms on the H200 in session 15,
#    never made the default), one process at a time.
nvidia-smi -L
OUT=$OUT/zoo TEST_WORKERS=6 TESTS_TIMEOUT=330 GPU_TESTS="$(cat scripts/gpu_tests.txt) tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py" \
  ZOO_MODELS=bert_dropout,gpt2,resnet18 ZOO_MODES=train ZOO_BACKENDS=inductor,nvfuser_dtensor ZOO_JOBS=3 ZOO_TIMEOUT=330 \
  ARM_MODELS=resnet18,vit_s16,convnext ARM_MODES=infer ARM_BACKENDS=inductor,nvfuser_dtensor ARM_JOBS=3 \
  OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout 350 bash scripts/gpu_zoo_own_graphs.sh
timeout 100 python3 scripts/gpu_top_kernels.py vit_s16 --backends inductor,nvfuser_dtensor --top 30 > $OUT/top_vit_s16.log 2>&1
grep "GPU activities" $OUT/top_vit_s16.log
NVFUSER_DTENSOR_MOVE_KERNELS=cat timeout 70 python3 scripts/gpu_top_kernels.py vit_s16 --backends nvfuser_dtensor --top 30 > $OUT/top_vit_s16_cat.log 2>&1
grep "GPU activities" $OUT/top_vit_s16_cat.log
