# Session 31, a device call (run from the project root):
#   source .device/setup.sh && bash benchmarks/results/session31/split_far.sh > $OUT/split_far.log 2>&1
# NVFUSER_DTENSOR_SPLIT_FAR=1 (Note [Parts of a region far apart]) against the default, our
# backend only, training, each model in its own process (two arms side by side, steps timed one
# at a time on a shared lock): rows ok, first calls, kernels, reserved memory; then ViT-S/16's
# kernels alone, one process per arm; and the switch's CPU-side test on the GPU.
nvidia-smi -L
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_backend.py -k "split_far or split_unrelated" > $OUT/split_tests.log 2>&1; tail -1 $OUT/split_tests.log
M=vit_s16,gpt2,llama,t5,bert,resnet18
OUT=$OUT/zoo ZOO_MODELS=$M ZOO_MODES=train ZOO_BACKENDS=nvfuser_dtensor ZOO_JOBS=6 ARM_MODELS=$M ARM_JOBS=6 \
  ARM_ENV=NVFUSER_DTENSOR_SPLIT_FAR=1 GPU_TESTS=none ZOO_TIMEOUT=330 OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 \
  timeout 345 bash scripts/gpu_zoo_own_graphs.sh
timeout 65 python3 scripts/gpu_top_kernels.py vit_s16 --backends nvfuser_dtensor --top 100 > $OUT/top_vit_s16.log 2>&1
NVFUSER_DTENSOR_SPLIT_FAR=1 timeout 65 python3 scripts/gpu_top_kernels.py vit_s16 --backends nvfuser_dtensor --top 100 > $OUT/top_vit_s16_split_far.log 2>&1
grep -H "GPU activities" $OUT/top_*.log
