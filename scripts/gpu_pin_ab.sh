#!/usr/bin/env bash
# One device call, after `source .device/setup.sh`: does EfficientNet-B0's fault
# (docs/nvfuser_faults.md item 9) come from the row-major allocation domains the backend pins
# on region outputs (Note [Output layout contract])? The recorded regions were replayed from
# nvFuser's printed text, which drops those pins (`stride_order=[]`), and replayed right.
#   1. the faulting region (forward.nvfuser_region_64, row 15 of the session-19 recording)
#      replayed with every pin (as the backend defines it), none, and subsets, each under
#      compute-sanitizer memcheck with the caching allocator off (memcheck then sees every
#      tensor's bounds) and each plain and blocking;
#   2. the model's training step alone in its process: eager, ours with the pins (default)
#      and without (NVFUSER_DTENSOR_PIN_ROW_MAJOR=0), plain (traced, blocking) and with CUDA graphs;
#   3. the default plain step under memcheck, caching off (the kernel that writes out of bounds);
#   4. every GPU test beside them (-v), with PIN_TESTS_ENV (e.g. NVFUSER_DTENSOR_PIN_ROW_MAJOR=0).
# Logs under $OUT/pin, summaries printed.
out="${OUT:-/tmp/gpu-pin}/pin"
source scripts/gpu_prelude.sh "$out"
rows="${PIN_ROWS:-benchmarks/results/h100_session19/regions_efficientnet_b0.jsonl}"
row="${PIN_ROW:-15}"
m="${PIN_MODEL:-efficientnet_b0}"
san=(/usr/local/cuda/bin/compute-sanitizer --tool memcheck --target-processes all --print-limit 4)
variants="${PIN_VARIANTS:-all none tv41,tv46,tv47 tv42,tv43,tv44,tv45 tv47 tv41 tv46}"
for pin in $variants; do
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 240 "${san[@]}" python3 scripts/region_replay.py run "$rows" \
    --start "$row" --stop "$((row + 1))" --pin "$pin" > "$out/replay_san_$pin.log" 2>&1 &
  CUDA_LAUNCH_BLOCKING=1 timeout 240 python3 scripts/region_replay.py run "$rows" \
    --start "$row" --stop "$((row + 1))" --pin "$pin" > "$out/replay_$pin.log" 2>&1 &
done
timeout 400 python3 scripts/gpu_accumulate_alone.py "$m" --arm eager --steps 2 > "$out/accum_eager.log" 2>&1 &
for pinned in 1 0; do
  (NVFUSER_DTENSOR_PIN_ROW_MAJOR=$pinned CUDA_LAUNCH_BLOCKING=1 NVFUSER_DTENSOR_TRACE=1 timeout 400 \
     python3 scripts/gpu_accumulate_alone.py "$m" --arm plain --steps 2 > "$out/accum_plain_pin$pinned.full.log" 2>&1
   grep -v "trace\]" "$out/accum_plain_pin$pinned.full.log" | grep -vE "Warning|warn\(" > "$out/accum_plain_pin$pinned.log"
   tail -30 "$out/accum_plain_pin$pinned.full.log" > "$out/accum_plain_pin${pinned}_last.log"; rm -f "$out/accum_plain_pin$pinned.full.log") &
  NVFUSER_DTENSOR_PIN_ROW_MAJOR=$pinned timeout 400 python3 scripts/gpu_accumulate_alone.py "$m" --arm graphs --steps 2 \
    > "$out/accum_graphs_pin$pinned.log" 2>&1 &
done
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 400 "${san[@]}" python3 scripts/gpu_accumulate_alone.py "$m" --arm plain --steps 1 --micro 1 \
  > "$out/sanitize_model.log" 2>&1 &  # whole: a head in the pipe would stop it early
if [ "${PIN_TESTS:-1}" != 0 ]; then
  env ${PIN_TESTS_ENV:-} timeout -s INT -k 20 420 python3 -m pytest -v -p no:cacheprovider -rfEs --tb=short \
    ${GPU_TESTS:-$(cat scripts/gpu_tests.txt)} > "$out/gpu_tests.log" 2>&1 &
fi
wait
for pin in $variants; do
  echo "== region row $row, pin=$pin: plain $(grep -E "^[0-9]+: " "$out/replay_$pin.log" | cut -c1-160 | tr '\n' ' ')"
  echo "   memcheck: $(grep -E "^[0-9]+: " "$out/replay_san_$pin.log" | cut -c1-100 | tr '\n' ' ')"
  grep -E "^=========" "$out/replay_san_$pin.log" | grep -vE "Host Frame|^=========\s+in |^=========\s*$" | head -10 | cut -c1-260
done
echo "== eager"; grep -vE "Warning|warn\(" "$out/accum_eager.log" | tail -6 | cut -c1-300
for pinned in 1 0; do
  echo "== plain, PIN_ROW_MAJOR=$pinned"; grep -E "step|OK|NOT|differs|Error|error" "$out/accum_plain_pin$pinned.log" | cut -c1-300 | head -12
  tail -4 "$out/accum_plain_pin${pinned}_last.log" | cut -c1-300
  echo "== graphs, PIN_ROW_MAJOR=$pinned"; grep -vE "Warning|warn\(" "$out/accum_graphs_pin$pinned.log" | tail -6 | cut -c1-300
done
echo "== memcheck, the model's plain step (default)"
grep -E "^========= |step|Error" "$out/sanitize_model.log" | grep -v "Host Frame" | head -30 | cut -c1-300
if [ "${PIN_TESTS:-1}" != 0 ]; then
  echo "== GPU tests ${PIN_TESTS_ENV:-}"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/gpu_tests.log" | tail -12 | cut -c1-250
  echo "per-test lines: $(grep -cE " PASSED" "$out/gpu_tests.log") passed, $(grep -cE " FAILED" "$out/gpu_tests.log") failed"
fi
tar -czf "${OUT:-/tmp/gpu-pin}/pin.tgz" -C "$out/.." pin 2>/dev/null
