#!/usr/bin/env bash
# Inference outputs lent, not copied (Note [CUDA graphs of our own]), on the GPU: one device
# call of about 9 minutes (wrap it in `timeout 590`), after `source .device/setup.sh`:
# 1. the CUDA-graph GPU tests (the runner's, the backend's, the global view's), beside step 2;
# 2. the zoo's inference steps, each model in its own process, against inductor and its
#    reduce-overhead mode, with an arm beside it whose outputs are copied as before
#    (NVFUSER_DTENSOR_LEND_FROM_BYTES past any output: LEND_MODELS, default the language
#    models whose logits are large);
# 3. issue 14's TP forwards at one GPU (TP_SIZES, default large: the two short rows): the global view (inputs copied into the recordings'
#    buffers) and the same with NVFUSER_DTENSOR_INPUTS_IN_PLACE=1, each run against inductor
#    in its own process.
# Budgets: TESTS_TIMEOUT (150), ZOO_TIMEOUT (260), TP_TIMEOUT (each of two runs, 110). Logs
# and results under $OUT.
set -uo pipefail
out="${OUT:-/tmp/gpu-lend-inference}"
source scripts/gpu_prelude.sh "$out/logs"

# beside the zoo, whose steps are timed under its own lock (the tests may disturb them a little)
timeout -s INT -k 15 "${TESTS_TIMEOUT:-150}" python3 -m pytest -v -p no:cacheprovider -rfEs --tb=short -n 3 \
  tests/test_cuda_graphs.py tests/test_cuda_graph_runner.py tests/distributed/test_local_cuda_graphs.py \
  > "$out/logs/graph_tests.log" 2>&1 &

OUT="$out/zoo" GPU_TESTS=none ZOO_MODES=infer ZOO_JOBS="${ZOO_JOBS:-7}" ZOO_TIMEOUT="${ZOO_TIMEOUT:-260}" \
  ZOO_BACKENDS=inductor,inductor:reduce-overhead,nvfuser_dtensor OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 \
  ARM_MODELS="${LEND_MODELS:-gpt2,qwen2,bert,roberta}" ARM_MODES=infer ARM_JOBS=4 \
  ARM_ENV=NVFUSER_DTENSOR_LEND_FROM_BYTES=1099511627776 bash scripts/gpu_zoo_own_graphs.sh > "$out/logs/zoo.txt" 2>&1
# the zoo script removes its work folder at the end: its printed tables (the copy arm's under
# "== arm") are what is left, besides $out/zoo/all.tgz
sed -n '/== zoo/,/^| model | mode | first call/p' "$out/logs/zoo.txt" | head -60
echo "== copy arm (outputs copied as before the change)"; sed -n '/== arm/,/^==/p' "$out/logs/zoo.txt" | head -30
wait
echo "== CUDA-graph GPU tests"; grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$out/logs/graph_tests.log" | tail -8

for arm in copied in_place; do
  env_arm=""; [ "$arm" = in_place ] && env_arm="NVFUSER_DTENSOR_INPUTS_IN_PLACE=1"
  env $env_arm timeout "${TP_TIMEOUT:-110}" torchrun --standalone --nproc_per_node 1 -m benchmarks.run --device cuda \
    --cases tp_mlp,tp_attention,sp_block --sizes "${TP_SIZES:-large}" --modes fwd --dtype bfloat16 --iters 50 \
    --budget-s "$(( ${TP_TIMEOUT:-110} - 20 ))" --backends inductor,nvfuser_dtensor,nvfuser_dtensor:global_view \
    --out "$out/tp_fwd_inputs_$arm" > "$out/logs/tp_fwd_inputs_$arm.log" 2>&1
  echo "== TP forwards, inputs $arm"; sed -n '/All runs/,$p' "$out/tp_fwd_inputs_$arm/summary.md" 2>/dev/null | cut -c1-220
done
tar -czf "$out/lend.tgz" -C "$out" logs $(cd "$out" && ls -d tp_fwd_inputs_* 2>/dev/null)
