# Session 37's second device call (about 560 s), after next_session.sh (session 36's) ran at this package:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session37/call_2.sh > $OUT/call_2.log 2>&1
# 1. the zoo's training rows, every model in its own process (13 compiling at once, timed one at
#    a time), against inductor and reduce-overhead (goals 4a, 4b, 5), with the GPU tests beside
#    it when GPU_TESTS is not "none" (after a change of defaults);
# 2. goal 4d: the pre-norm transformer block fwd+bwd against inductor and reduce-overhead, in
#    one process (benchmarks/measure.step_function now begins a CUDA-graph step each call).
start=$SECONDS
nvidia-smi -L
OUT=$OUT/zoo ZOO_MODES=train ZOO_JOBS=13 GPU_TESTS=${GPU_TESTS-none} TEST_WORKERS=${TEST_WORKERS:-4} TESTS_TIMEOUT=${ZOO_S:-400} \
  ZOO_TIMEOUT=${ZOO_S:-400} OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 bash scripts/gpu_zoo_own_graphs.sh
echo "== zoo ($((SECONDS - start)) s)"
left=$(( ${DEADLINE_S:-550} - (SECONDS - start) ))
[ "$left" -gt 40 ] && timeout $left python3 -m benchmarks.run --device cuda --dtype bfloat16 --iters 30 --cases transformer_block \
  --sizes large --backends inductor,inductor:reduce-overhead,nvfuser_dtensor --out $OUT/suite > $OUT/block.log 2>&1
tail -12 $OUT/block.log
echo "== done ($((SECONDS - start)) s)"
