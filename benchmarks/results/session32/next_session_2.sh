# Prepared in session 32 for the next device session's second call (about 560 s):
#   source .device/setup.sh && bash benchmarks/results/session32/next_session_2.sh > $OUT/next_session_2.log 2>&1
# the whole zoo, training and inference, against eager, inductor and its reduce-overhead mode,
# each model in its own process, steps timed one at a time (goal 4's table); no GPU tests
# beside it (add them back if the package changed after session 32).
nvidia-smi -L
OUT=$OUT/zoo GPU_TESTS=none ZOO_TIMEOUT=540 OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout 560 bash scripts/gpu_zoo_own_graphs.sh
