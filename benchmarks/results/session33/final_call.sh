# Prepared in session 33 for its last device call, which got no machine (seven tries failed and
# left too little time to start one): the next device session's first call (about 460 s) now.
# It runs every GPU test at the final package, which no GPU has run (the small forwards' rule
# for CUDA graphs, BART's fix, is new; the far-apart cut's default ran with its variable set).
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session33/final_call.sh > $OUT/final_call.log 2>&1
# (ZOO_S, TESTS_S, PROFILE_S, WORKERS: limits and pytest workers of part 1, for a short budget)
# 1. every GPU test at main's defaults (the far-apart cut on, small forwards taking their
#    backwards out of capture), and beside them BART's training row against inductor and its
#    reduce-overhead mode (recordings, memory, rows right; steps rough beside the tests), and
#    a cProfile of GPT-2's and ViT-S/16's training steps, ours and reduce-overhead
#    (scripts/gpu_step_profile.py; ViT-S/16 ran at 0.92x reduce-overhead with fewer kernel ms);
# 2. then, nothing else on the GPU, the fusion suite's small and medium bf16 cases against
#    inductor (goal 4f) and the pre-norm transformer block against reduce-overhead (goal 4d).
nvidia-smi -L
OUT=$OUT/zoo ZOO_MODELS=bart ZOO_MODES=train ZOO_JOBS=1 ZOO_TIMEOUT=${ZOO_S:-280} GPU_TESTS=none \
  OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout $((${ZOO_S:-280} + 15)) bash scripts/gpu_zoo_own_graphs.sh > $OUT/zoo.log 2>&1 &
for m in gpt2 vit_s16; do  # host time of the step, by function (rough beside the tests)
  (for b in nvfuser_dtensor inductor:reduce-overhead; do
     timeout ${PROFILE_S:-140} python3 scripts/gpu_step_profile.py $m --backend $b --steps 20 > $OUT/profile_${m}_${b%%:*}.log 2>&1; done) &
done
timeout -s INT -k 20 ${TESTS_S:-290} python3 -m pytest -v -p no:cacheprovider -rfEs --tb=short -n ${WORKERS:-6} $(cat scripts/gpu_tests.txt) \
  tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py > $OUT/gpu_tests.log 2>&1
echo "== GPU tests, main's defaults"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu_tests.log | tail -12
wait
grep -vE "Warning|warn\(" $OUT/zoo.log | grep -E "^\|" | cut -c1-400
if [ "${SKIP_SUITE:-0}" != 1 ]; then  # SKIP_SUITE=1: part 1 only (about 320 s)
echo "== fusion suite, bf16, small and medium (goal 4f)"
timeout 75 python3 -m benchmarks.run --device cuda --dtype bfloat16 --iters 30 \
  --cases bias_gelu_tanh,bias_gelu_exact,layer_norm,rms_norm,softmax,add_layer_norm --sizes small,medium \
  --out $OUT/suite --budget-s 55 > $OUT/suite.log 2>&1
echo "== pre-norm transformer block against reduce-overhead (goal 4d)"
timeout 70 python3 -m benchmarks.run --device cuda --dtype bfloat16 --iters 30 --cases transformer_block --sizes large \
  --backends inductor,inductor:reduce-overhead,nvfuser_dtensor --out $OUT/suite --append > $OUT/block.log 2>&1
grep -E "^\|" $OUT/suite/summary.md | head -40
fi
for f in $OUT/profile_*.log; do echo "== $f"; grep -vE "Warning|warn\(" $f | grep -A22 "^==" | cut -c1-200; done
