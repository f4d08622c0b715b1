#!/usr/bin/env bash
# One device call (about 8 minutes), after `source .device/setup.sh`: the model zoo with the
# backend's own CUDA-graph runner (every model in its own process, all 13 compiling at once,
# timing their steps one at a time) against inductor and its reduce-overhead mode, next to the GPU tests and
# the top kernels of GPT-2's training step (REGION_ERRORS="gpt2 roberta": the whole nvFuser
# errors of those models' fallback regions, scripts/gpu_region_errors.py; DIAG="bart": step times
# and what is captured; ZOO_MODELS, ZOO_MODES, ZOO_JOBS, ZOO_BACKENDS narrow the zoo; OVERHEAD_TIMEOUT=0
# skips the call overhead, TOP_KERNELS=0 GPT-2's top kernels; ARM_MODELS, ARM_ENV, ARM_BACKENDS and ARM_JOBS: an A/B
# arm beside the zoo (ARM_MODES, default train), e.g. ARM_MODELS=vit_s16 ARM_ENV=NVFUSER_DTENSOR_MOVE_KERNELS=cat; TIMING_LOCK:
# the timing lock's file, to share it with scripts/gpu_region_times.sh run beside this script);
# FAULT_PROBES (models) with FAULT_OPTIONS (JSON): scripts/gpu_fault_probe.py traced, each in its own
# process; REUSE_MODELS: scripts/gpu_graph_memory_reuse.py in bf16 (REUSE_TIMEOUT, default ZOO_TIMEOUT: 240 s
# did not see EfficientNet-B0 through two compiles beside the zoo); ACCUM_ALONE (models):
# scripts/gpu_accumulate_alone.py, eager and ours without CUDA graphs each in its own process, ours
# traced, blocking and verifying every region (which region first differs, or faults); REPLAY_MODELS:
# scripts/region_replay.py, every region of the model recorded on the GPU, then each replayed alone on
# random inputs of its layouts against the evaluator (nvFuser's own faults and wrong numbers); GPU_TESTS
# (default: every GPU test, scripts/gpu_tests.txt; "none": no tests; TEST_WORKERS=N: pytest-xdist workers; interrupted at the deadline TESTS_TIMEOUT, default 400 s, with SIGINT, so pytest still
# prints its failures); SANITIZE_MODELS: one plain training step under compute-sanitizer memcheck (the
# first invalid access and its kernel), SANITIZE_REPLAY (jsonl files): recorded regions replayed under it; everything in $OUT/all.tgz plus printed tables.
out="${OUT:-/tmp/gpu-zoo-own}"; w="$out/work"
source scripts/gpu_prelude.sh "$w/logs"
zt="${ZOO_TIMEOUT:-430}"
lock="${TIMING_LOCK:-$w/timing.lock}"  # shared with scripts/gpu_region_times.sh run beside it
timeout "$zt" python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs "${ZOO_JOBS:-13}" --models "${ZOO_MODELS:-}" --modes "${ZOO_MODES:-train,infer}" \
  --timeout-s "$((zt - 15))" --warmup 3 --iters 10 --backends "${ZOO_BACKENDS:-inductor,inductor:reduce-overhead,nvfuser_dtensor}" \
  --timing-lock "$lock" --out "$w/h200_models" > "$w/logs/zoo.log" 2>&1 &
if [ -n "${ARM_MODELS:-}" ]; then  # an A/B arm beside the zoo (ARM_ENV: its switch), on the same timing lock
  env ${ARM_ENV:-} timeout "$zt" python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs "${ARM_JOBS:-2}" \
    --models "$ARM_MODELS" --modes "${ARM_MODES:-train}" --timeout-s "$((zt - 15))" --warmup 3 --iters 10 \
    --backends "${ARM_BACKENDS:-nvfuser_dtensor}" --timing-lock "$lock" --out "$w/arm" > "$w/logs/zoo_arm.log" 2>&1 &
fi
# -v: every test's outcome is on its own line as it ends, so a run killed at its deadline
# (session 19's printed no summary) still tells which passed and failed
if [ "${GPU_TESTS:-}" = none ]; then echo "GPU_TESTS=none: no GPU tests in this call" > "$w/logs/gpu_tests.log"; else
timeout -s INT -k 20 "${TESTS_TIMEOUT:-400}" python3 -m pytest -v -p no:cacheprovider -rfEs --tb=short ${TEST_WORKERS:+-n "$TEST_WORKERS"} ${GPU_TESTS:-$(cat scripts/gpu_tests.txt)} > "$w/logs/gpu_tests.log" 2>&1 &
fi
fo="${FAULT_OPTIONS:-}"; [ -n "$fo" ] || fo='{}'
for m in ${FAULT_PROBES:-}; do  # one training step per region call, synchronized and printed: a fault's region
  CUDA_LAUNCH_BLOCKING=1 NVFUSER_DTENSOR_TRACE=1 NVFUSER_DTENSOR_CHANNELS_LAST_ON_CUDA=1 timeout 240 python3 scripts/gpu_fault_probe.py "$m" --steps 3 \
    --options "$fo" 2>&1 | grep -vE "Warning|warn\(" | tail -300 > "$w/logs/fault_$m.log" &
done
for m in ${REUSE_MODELS:-}; do  # gradient accumulation and kept gradients, CUDA graphs against none
  timeout "${REUSE_TIMEOUT:-$zt}" python3 scripts/gpu_graph_memory_reuse.py --models "$m" --size real --dtype bfloat16 --steps 2 \
    > "$w/logs/reuse_$m.log" 2>&1 &
done
for m in ${ACCUM_ALONE:-}; do  # one arm per process: eager, and ours traced (the region before a fault) and verified
  timeout "$zt" python3 scripts/gpu_accumulate_alone.py "$m" --arm eager --steps 2 > "$w/logs/accum_${m}_eager.log" 2>&1 &
  timeout "$zt" python3 scripts/gpu_accumulate_alone.py "$m" --arm graphs --steps 2 > "$w/logs/accum_${m}_graphs.log" 2>&1 &
  (CUDA_LAUNCH_BLOCKING=1 NVFUSER_DTENSOR_TRACE=1 timeout "$zt" python3 scripts/gpu_accumulate_alone.py "$m" --arm plain --steps 2 \
    --options '{"verify": true}' > "$w/logs/accum_${m}_plain_full.log" 2>&1;
   grep -v "trace\]" "$w/logs/accum_${m}_plain_full.log" | grep -vE "Warning|warn\(" > "$w/logs/accum_${m}_plain.log";
   tail -40 "$w/logs/accum_${m}_plain_full.log" > "$w/logs/accum_${m}_plain_last.log"; rm -f "$w/logs/accum_${m}_plain_full.log") &
done
# Under compute-sanitizer the caching allocator is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1): memcheck
# knows only cudaMalloc's allocations, so a write past a tensor inside one of the allocator's
# segments passes unseen otherwise (session 19's replays under memcheck were blind so).
for m in ${SANITIZE_MODELS:-}; do  # one plain training step under compute-sanitizer: the first invalid access, by kernel
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "$zt" /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 6 python3 scripts/gpu_accumulate_alone.py "$m" \
    --arm plain --steps 1 --micro 1 > "$w/logs/sanitize_$m.log" 2>&1 &  # whole: a head would stop it early
done
for f in ${SANITIZE_REPLAY:-}; do  # recorded regions (region_replay.py record) replayed in order, shared, under memcheck
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "$zt" /usr/local/cuda/bin/compute-sanitizer --tool memcheck --target-processes all \
    --print-limit 6 python3 scripts/region_replay.py run "$f" --shared > "$w/logs/sanitize_replay_$(basename "$f" .jsonl).log" 2>&1 &
done
for m in ${REPLAY_MODELS:-}; do  # every region alone, on inputs of the layouts the model gave it
  (timeout "$((zt / 2))" python3 scripts/region_replay.py record "$m" --device cuda --steps 2 --out "$w/logs/regions_$m.jsonl" \
     > "$w/logs/replay_$m.log" 2>&1;
   CUDA_LAUNCH_BLOCKING=1 timeout "$((zt / 2))" python3 scripts/region_replay.py run "$w/logs/regions_$m.jsonl" >> "$w/logs/replay_$m.log" 2>&1) &
done
for m in ${REGION_ERRORS:-}; do  # whole nvFuser errors of the regions that fall back, definitions dumped
  NVFUSER_DISABLE=parallel_compile timeout 300 python3 scripts/gpu_region_errors.py "$m" --dump "$w/dumps/$m" > "$w/logs/region_errors_$m.log" 2>&1 &
done
for m in ${DIAG:-}; do  # step times, compiled graphs and what is captured (INFO log lines), training steps
  TORCH_LOGS=graph_breaks timeout 300 python3 scripts/gpu_region_errors.py "$m" --steps 8 --info > "$w/logs/diag_$m.log" 2>&1 &
done
[ "${TOP_KERNELS:-1}" != 0 ] && timeout 300 python3 scripts/gpu_top_kernels.py gpt2 --backends inductor,nvfuser_dtensor --top 15 > "$w/logs/top_gpt2.log" 2>&1 &
wait
[ "${OVERHEAD_TIMEOUT:-60}" != 0 ] && timeout "${OVERHEAD_TIMEOUT:-60}" python3 scripts/gpu_call_overhead.py --calls 300 \
  --backends eager,inductor,inductor:reduce-overhead,nvfuser_dtensor,nvfuser_dtensor:no_cuda_graphs > "$w/logs/call_overhead.log" 2>&1
tar -czf "$out/all.tgz" -C "$w" .
echo "== GPU tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$w/logs/gpu_tests.log" | tail -12
# counted on pytest's own lines only (with or without xdist): warnings quote nvFuser's "ASSERT FAILED"
echo "per-test lines: $(grep -cE "(PASSED tests/|^tests/\S+ PASSED)" "$w/logs/gpu_tests.log") passed, $(grep -cE "(FAILED tests/|^tests/\S+ FAILED)" "$w/logs/gpu_tests.log") failed, $(grep -cE "(ERROR tests/|^tests/\S+ ERROR)" "$w/logs/gpu_tests.log") errors"
grep -E "^tests/.* (FAILED|ERROR)" "$w/logs/gpu_tests.log" | cut -c1-200 | head -20
echo "== zoo"; grep -E "^- nvfuser" "$w/h200_models/summary.md"; python3 scripts/zoo_table.py "$w/h200_models/results.json"
grep -E "^\| [a-z]" "$w/h200_models/summary.md" | grep -v "| ok |" | cut -c1-400
[ -n "${ARM_MODELS:-}" ] && { echo "== arm: ${ARM_ENV:-} ${ARM_BACKENDS:-nvfuser_dtensor}"; python3 scripts/zoo_table.py "$w/arm/results.json" | grep -E "^\| "; }
python3 - "$w/h200_models/results.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    for f in r.get("fallback_all") or []:
        print("fallback", r["case"], r["mode"], r["backend"], f[:260])
PY
for m in ${REGION_ERRORS:-}; do echo "== region errors $m"; grep -vE "Warning|warn\(" "$w/logs/region_errors_$m.log" | cut -c1-400 | head -60; done
for m in ${DIAG:-}; do echo "== diag $m"; grep -E "Graph Break Reason" "$w/logs/diag_$m.log" | sort | uniq -c | cut -c1-300 | head -5
  grep -E "^step|^compiled|^cuda_graph_stats|^memory|without CUDA|uncaptured" "$w/logs/diag_$m.log" | cut -c1-300 | head -40; done
for m in ${FAULT_PROBES:-}; do echo "== fault probe $m ${FAULT_OPTIONS:-}"; tail -30 "$w/logs/fault_$m.log" | cut -c1-400; done
for m in ${REUSE_MODELS:-}; do echo "== reuse $m (bf16)"; grep -vE "Warning|warn\(" "$w/logs/reuse_$m.log" | tail -20 | cut -c1-400; done
for m in ${REPLAY_MODELS:-}; do echo "== regions of $m replayed alone"
  grep -E "MISMATCH|ERROR|FAULT|replayed|written|Error" "$w/logs/replay_$m.log" | cut -c1-400 | head -30; done
for m in ${SANITIZE_MODELS:-}; do echo "== compute-sanitizer memcheck, $m, one plain step"; grep -E "^=========|step|OK|NOT" "$w/logs/sanitize_$m.log" | grep -v "Host Frame" | head -40 | cut -c1-300; done
for f in ${SANITIZE_REPLAY:-}; do echo "== compute-sanitizer memcheck, $f replayed"; grep -E "^=========|^[0-9]+: [A-Z]|replayed" "$w/logs/sanitize_replay_$(basename "$f" .jsonl).log" | grep -v "Host Frame" | head -40 | cut -c1-300; done
for m in ${ACCUM_ALONE:-}; do echo "== accumulation alone $m: eager, then ours (verify; last lines before the end)"
  tail -6 "$w/logs/accum_${m}_eager.log" | cut -c1-300; echo "-- graphs"; grep -vE "Warning|warn\(" "$w/logs/accum_${m}_graphs.log" | tail -8 | cut -c1-300; echo "-- plain"; grep -E "step|OK|NOT|differs|Error" "$w/logs/accum_${m}_plain.log" | cut -c1-400 | head -30
  tail -8 "$w/logs/accum_${m}_plain_last.log" | cut -c1-400; done
echo "== call overhead"; grep -E "us/call" "$w/logs/call_overhead.log"
echo "== top kernels, GPT-2 train"; cut -c1-170 "$w/logs/top_gpt2.log" | grep -vE "Warning|warn" | tail -45
rm -rf "$w"
