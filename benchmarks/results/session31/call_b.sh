# Session 31, device call 2, at the tree with the two new defaults (patch convolutions as
# matrix products, regions cut where far apart), every log under $OUT:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session31/call_b.sh > $OUT/call_b.log 2>&1
# every GPU test, and the zoo rows both defaults touch with our backend (each model in its own
# process, judged against eager): ViT-S/16 and ConvNeXt-T training and inference (inference
# graphs run channels-last on CUDA), BERT and T5 training (the arm, same defaults).
nvidia-smi -L
OUT=$OUT/zoo TEST_WORKERS=6 TESTS_TIMEOUT=330 GPU_TESTS="$(cat scripts/gpu_tests.txt) tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py" \
  ZOO_MODELS=vit_s16,convnext ZOO_MODES=train,infer ZOO_BACKENDS=nvfuser_dtensor ZOO_JOBS=4 ZOO_TIMEOUT=330 \
  ARM_MODELS=bert,t5 ARM_MODES=train ARM_JOBS=2 \
  OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout 350 bash scripts/gpu_zoo_own_graphs.sh
