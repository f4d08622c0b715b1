# Session 35's device call (about 520 s), on the package of its commit:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session35/device_call.sh > $OUT/device_call.log 2>&1
# 1. whether torch 2.11 runs the partition proposal on bit masks, and every GPU test (alone);
# 2. the zoo's training rows of GPT-2 (goal 4b), Phi and ViT-S/16 (the rows below
#    reduce-overhead) and T5 (its graph work leans on the proposal) against inductor and
#    reduce-overhead, each model in its own process;
# 3. if the deadline allows, alone: the host syncs and the GPU's idle gaps of one steady step
#    of GPT-2 and Phi (scripts/gpu_step_profile.py --gaps): where our step's time beyond its
#    kernels goes; GPT-2 again with NVFUSER_DTENSOR_MIN_LAUNCHES=1 (its loss graphs captured).
# TESTS_S, ZOO_S, ZOO_MODELS, DEADLINE_S (whole call) for a short budget; SKIP_ZOO=1: part 1 only.
start=$SECONDS
nvidia-smi -L
python3 -c "import torch; from nvfuser_dtensor_backend.partition_proposal import fx_algorithm_copied as f; print('torch', torch.__version__, 'proposal on bit masks:', f())" 2>&1 | tail -1
timeout -s INT -k 20 ${TESTS_S:-230} python3 -m pytest -v -p no:cacheprovider -rfEs --tb=short -n ${WORKERS:-8} $(cat scripts/gpu_tests.txt) \
  tests/distributed/test_local_cuda_graphs.py tests/test_packaging.py > $OUT/gpu_tests.log 2>&1
echo "== GPU tests ($((SECONDS - start)) s)"; grep -E "^(FAILED|ERROR)|passed|failed|no tests" $OUT/gpu_tests.log | tail -12
if [ "${SKIP_ZOO:-0}" != 1 ]; then
OUT=$OUT/zoo ZOO_MODELS=${ZOO_MODELS:-gpt2,phi,vit_s16,t5} ZOO_MODES=train ZOO_JOBS=${ZOO_JOBS:-4} GPU_TESTS=none \
  ZOO_TIMEOUT=${ZOO_S:-230} OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout $((${ZOO_S:-230} + 20)) bash scripts/gpu_zoo_own_graphs.sh
echo "== zoo done ($((SECONDS - start)) s)"
fi
for arm in gpt2: gpt2:NVFUSER_DTENSOR_MIN_LAUNCHES=1 phi:; do
  m=${arm%%:*}; envs=${arm#*:}; tag=$m${envs:+_min1}
  left=$(( ${DEADLINE_S:-540} - (SECONDS - start) ))
  [ "$left" -gt 75 ] || { echo "== no time left for the gaps of $arm ($left s)"; continue; }
  env $envs timeout $((left - 5)) python3 scripts/gpu_step_profile.py $m --gaps --steps 10 --top 12 > $OUT/gaps_$tag.log 2>&1
  echo "== gaps of $arm ($((SECONDS - start)) s)"; grep -vE "Warning|warn\(|^\s*$" $OUT/gaps_$tag.log | tail -22
done
