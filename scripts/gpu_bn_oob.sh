#!/usr/bin/env bash
# One device call, after `source .device/setup.sh`: nvFuser's out-of-bounds writes in training
# batch-norm regions (docs/nvfuser_faults.md item 9), under compute-sanitizer memcheck with the
# caching allocator off (memcheck then knows every tensor's bounds):
#   1. every recorded region of EfficientNet-B0's forward replayed (which ones write out of bounds);
#   2. variants of two of them (scripts/region_variants.py: outputs left out, two-pass statistics,
#      segment_set after the statistics): which definition stops the writes;
#   3. nvFuser's segmentation, heuristics and kernels of the faulting region (NVFUSER_DUMP);
#   4. one plain training step of each of OOB_MODELS under memcheck (which models are hit).
# Logs under $OUT/oob, summaries printed.
out="${OUT:-/tmp/gpu-oob}/oob"
source scripts/gpu_prelude.sh "$out"
rows="${OOB_ROWS:-benchmarks/results/h100_session19/regions_efficientnet_b0.jsonl}"
t="${OOB_TIMEOUT:-330}"
san=(/usr/local/cuda/bin/compute-sanitizer --tool memcheck --target-processes all --print-limit 2)
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
timeout "$t" "${san[@]}" python3 scripts/region_replay.py run "$rows" > "$out/replay_all.log" 2>&1 &
python3 scripts/region_variants.py "$rows" --rows "${OOB_VARIANT_ROWS:-0,15}" --out "$out/variants.jsonl"
timeout "$t" "${san[@]}" python3 scripts/region_replay.py run "$out/variants.jsonl" > "$out/replay_variants.log" 2>&1 &
(unset PYTORCH_NO_CUDA_MEMORY_CACHING; NVFUSER_DUMP=segmented_fusion,scheduler_params,cuda_kernel,launch_param timeout 200 \
   python3 scripts/region_replay.py run "$rows" --start 15 --stop 16 --pin none > "$out/dump_row15.log" 2>&1) &
for m in ${OOB_MODELS:-resnet18 vit_s16 convnext gpt2}; do
  timeout "$t" "${san[@]}" python3 scripts/gpu_accumulate_alone.py "$m" --arm plain --steps 1 --micro 1 > "$out/model_$m.log" 2>&1 &
done
wait
echo "== EfficientNet-B0's recorded regions under memcheck"; grep -E "^[0-9]+: |replayed" "$out/replay_all.log" | cut -c1-200
echo "== variants under memcheck"; grep -E "^[0-9]+: |replayed" "$out/replay_variants.log" | cut -c1-160
echo "== dump of row 15: segments and heuristics"
grep -E "^(group|Segmented|g[0-9]|[A-Za-z]+ Scheduler|=====)|Heuristic|blockDim|gridDim|launch" "$out/dump_row15.log" | head -60 | cut -c1-200
for m in ${OOB_MODELS:-resnet18 vit_s16 convnext gpt2}; do
  echo "== $m plain step under memcheck: $(grep -E "ERROR SUMMARY" "$out/model_$m.log" | head -1) $(grep -E "OK|NOT" "$out/model_$m.log" | tail -1)"
  grep -E "^=========     at nvf|Access to|nearest allocation" "$out/model_$m.log" | head -3 | cut -c1-220
done
tar -czf "${OUT:-/tmp/gpu-oob}/oob.tgz" -C "$out/.." oob 2>/dev/null
