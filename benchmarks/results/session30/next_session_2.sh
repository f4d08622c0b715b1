# The next device session's second call, prepared in session 30 (run from the project root):
#   source .device/setup.sh && bash benchmarks/results/session30/next_session_2.sh > $OUT/next_session_2.log 2>&1
# goal 4's table at session 30's defaults (tangents read in place, `_to_copy` counted as
# compute): the whole zoo, training and inference, against inductor and its reduce-overhead
# mode, each model in its own process, steps timed one at a time, no GPU tests beside it
# (they passed at this package in session 30's call 3; add them back if the package changed).
nvidia-smi -L
OUT=$OUT/zoo GPU_TESTS=none ZOO_TIMEOUT=540 OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout 560 bash scripts/gpu_zoo_own_graphs.sh
