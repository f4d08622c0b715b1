#!/usr/bin/env bash
# One device call, after `source .device/setup.sh`: recorded regions replayed alone and timed
# (scripts/region_replay.py run --time), file after file, then each file's slowest rows again
# with nvFuser's segmentation printed (NVFUSER_DUMP=segmented_fusion). No model compiles.
#   REGION_FILES="a.jsonl b.jsonl" [TIME_ITERS=20] [SLOWEST=3] [REPLAY_TIMEOUT=240] bash scripts/gpu_region_times.sh
# PARALLEL=1 replays the files side by side (their compiles overlap); TIMING_LOCK=FILE times each
# row while holding that lock, so rows of different files, or the zoo's steps
# (scripts/gpu_zoo_own_graphs.sh with the same TIMING_LOCK), never share the GPU while timed.
# Default files: ResNet-18's training regions in NCHW, channels-last, and the channels-last
# variants (benchmarks/results/h100_session21/regions). Logs in $OUT/all.tgz; the totals and
# slowest rows are printed.
out="${OUT:-/tmp/gpu-region-times}"; w="$out/work"
source scripts/gpu_prelude.sh "$w/logs"
d=benchmarks/results/h100_session21/regions
files="${REGION_FILES:-$d/resnet18_nchw.jsonl $d/resnet18_channels_last_mixed_ignores_size1.jsonl $d/resnet18_channels_last_mixed_ignores_size1_memory_order_inputs.jsonl $d/resnet18_channels_last_mixed_ignores_size1_segset_sums.jsonl}"
one_file() {  # $1: a recorded file; its timed replay, then its slowest rows' segments
  local f="$1" name i slowest
  name=$(basename "$f" .jsonl)
  timeout "${REPLAY_TIMEOUT:-240}" python3 scripts/region_replay.py run "$f" --time "${TIME_ITERS:-20}" \
    ${TIMING_LOCK:+--timing-lock "$TIMING_LOCK"} > "$w/logs/times_$name.log" 2> "$w/logs/times_$name.err"
  # the slowest rows by time x calls (region_replay prints them), then their segments
  slowest=$(sed -n 's/^slowest rows per step: //p' "$w/logs/times_$name.log")
  for i in $(echo $slowest | cut -d' ' -f1-"${SLOWEST:-3}"); do
    NVFUSER_DUMP=segmented_fusion timeout 60 python3 scripts/region_replay.py run "$f" --start "$i" --stop "$((i + 1))" \
      > "$w/logs/segments_${name}_$i.log" 2>&1
  done
}
for f in $files; do
  if [ "${PARALLEL:-}" = 1 ]; then one_file "$f" & else one_file "$f"; fi
done
wait
tar -czf "$out/all.tgz" -C "$w" .
for f in $files; do
  name=$(basename "$f" .jsonl)
  echo "#### $name"; tail -1 "$w/logs/times_$name.log"
  grep -E "^[0-9]+: " "$w/logs/times_$name.log" | grep -v ": ok " | cut -c1-200 | head -5
done
rm -rf "$w"
