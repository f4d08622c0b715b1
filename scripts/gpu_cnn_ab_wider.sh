#!/usr/bin/env bash
# One device call (about 5 minutes), after `source .device/setup.sh`, everything at once:
# - the channels-last A/B on CNN training steps (issue 13, goals 4a and 4c: read the
#   `kernels` and kernel-ms columns of the two nvfuser_dtensor rows), AB_MODELS;
# - the wider zoo with our backend only (faults, layouts and alignment the CPU cannot show),
#   WIDER_MODELS, training and inference, each model in its own process;
# - GPU tests (GPU_TESTS) and the gradient-accumulation check of BERT (REUSE_MODELS).
# Both zoo runs share one timing lock, so no timed step shares the GPU. ZT bounds each.
out="${OUT:-/tmp/gpu-cnn-ab-wider}"
source scripts/gpu_prelude.sh "$out/logs"
zt="${ZT:-260}"
zoo() {  # NAME MODELS MODES BACKENDS JOBS
  timeout "$zt" python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs "$5" \
    --models "$2" --modes "$3" --backends "$4" --timeout-s "$((zt - 15))" --warmup 3 --iters 10 \
    --timing-lock "$out/timing.lock" --out "$out/$1" > "$out/logs/zoo_$1.log" 2>&1
}
NVFUSER_DTENSOR_CHANNELS_LAST_ON_CUDA=1 zoo ab "${AB_MODELS:-resnet18,convnext,efficientnet_b0}" train \
  "${AB_BACKENDS:-inductor,nvfuser_dtensor,nvfuser_dtensor:channels_last}" 3 &
zoo wider "${WIDER_MODELS:-phi3,mixtral,swin,tv_densenet,gemma,qwen3}" train,infer nvfuser_dtensor 6 &
timeout "$((zt - 20))" python3 -m pytest -q -p no:cacheprovider -rfEs ${GPU_TESTS:-tests/test_cuda_graphs.py \
  tests/test_channels_last.py tests/test_grouped_copies.py tests/test_zero_size.py} > "$out/logs/gpu_tests.log" 2>&1 &
for m in ${REUSE_MODELS:-bert}; do
  timeout 80 python3 scripts/gpu_graph_memory_reuse.py --models "$m" --size real > "$out/logs/reuse_$m.log" 2>&1
done
wait
echo "== GPU tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/logs/gpu_tests.log" | tail -12
grep -E "^E  " "$out/logs/gpu_tests.log" | head -20
for m in ${REUSE_MODELS:-bert}; do echo "== reuse $m"; grep -E "accumulate step|kept|OK|WRONG" "$out/logs/reuse_$m.log"; done
for z in ab wider; do
  echo "== zoo $z"; grep -E "^- nvfuser" "$out/$z/summary.md"
  python3 scripts/zoo_table.py "$out/$z/results.json" | grep -E "^\| " | cut -c1-260
  grep -E "^\| [a-z]" "$out/$z/summary.md" | grep -v "| ok |" | cut -c1-400
done
echo "== channels-last arm (its plain column: the default arm)"
python3 scripts/zoo_table.py "$out/ab/results.json" --ours nvfuser_dtensor:channels_last --plain nvfuser_dtensor | grep -E "^\| " | cut -c1-260
