# Session 35's device call (about 520 s), on the package of its commit:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session35/device_call.sh > $OUT/device_call.log 2>&1
# 1. whether torch 2.11 runs the partition proposal on bit masks, and every GPU test (alone);
# 2. alone, one process each, as the deadline allows (scripts/gpu_step_profile.py --gaps):
#    the step time (median of 10 synchronized steps), host syncs and the GPU's idle gaps of
#    GPT-2 (goal 4b) and Phi (the row furthest below reduce-overhead), ours and
#    reduce-overhead's, and ours with NVFUSER_DTENSOR_MIN_LAUNCHES=1 (GPT-2's loss graphs
#    captured);
# 3. if time is left, the zoo's training rows of ZOO_MODELS against inductor and
#    reduce-overhead, each model in its own process.
# TESTS_S, DEADLINE_S (whole call), ARMS, ZOO_MODELS for a short budget.
start=$SECONDS
nvidia-smi -L
python3 -c "import torch; from nvfuser_dtensor_backend.partition_proposal import fx_algorithm_copied as f; print('torch', torch.__version__, 'proposal on bit masks:', f())" 2>&1 | tail -1
timeout -s INT -k 20 ${TESTS_S:-220} python3 -m pytest -v -p no:cacheprovider -rfEs --tb=short -n ${WORKERS:-8} $(cat scripts/gpu_tests.txt) \
  tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py > $OUT/gpu_tests.log 2>&1
echo "== GPU tests ($((SECONDS - start)) s)"; grep -E "^(FAILED|ERROR)|passed|failed|no tests" $OUT/gpu_tests.log | tail -12
deadline=${DEADLINE_S:-530}
for arm in ${ARMS:-gpt2:nvfuser_dtensor: gpt2:inductor:reduce-overhead: gpt2:nvfuser_dtensor:NVFUSER_DTENSOR_MIN_LAUNCHES=1 phi:nvfuser_dtensor: phi:inductor:reduce-overhead:}; do
  m=${arm%%:*}; rest=${arm#*:}; envs=${rest##*:}; backend=${rest%:*}
  tag=${m}_${backend//[:-]/_}${envs:+_min1}
  left=$(( deadline - (SECONDS - start) ))
  [ "$left" -gt 60 ] || { echo "== no time left for $arm ($left s)"; continue; }
  env $envs timeout $((left - 5)) python3 scripts/gpu_step_profile.py $m --backend $backend --gaps --steps 10 --top 10 > $OUT/gaps_$tag.log 2>&1
  echo "== $m $backend $envs ($((SECONDS - start)) s)"; grep -vE "Warning|warn\(|^\s*$" $OUT/gaps_$tag.log | grep -A40 "^== " | head -24
done
left=$(( deadline - (SECONDS - start) ))
if [ -n "${ZOO_MODELS:-}" ] && [ "$left" -gt 150 ]; then
OUT=$OUT/zoo ZOO_MODES=train ZOO_JOBS=${ZOO_JOBS:-4} GPU_TESTS=none ZOO_TIMEOUT=$((left - 20)) OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 \
  timeout $left bash scripts/gpu_zoo_own_graphs.sh
fi
echo "== done ($((SECONDS - start)) s)"
