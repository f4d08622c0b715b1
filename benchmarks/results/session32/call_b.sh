# Session 32, device call B (about 560 s), at the final package:
#   source .device/setup.sh && bash benchmarks/results/session32/call_b.sh > $OUT/call_b.log 2>&1
# the whole zoo, training and inference, against eager, inductor and its reduce-overhead mode,
# each model in its own process, steps timed one at a time (goal 4's table); no GPU tests
# beside it (call A ran every GPU test with the package's code as it is now).
nvidia-smi -L
OUT=$OUT/zoo GPU_TESTS=none ZOO_TIMEOUT=540 OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout 560 bash scripts/gpu_zoo_own_graphs.sh
