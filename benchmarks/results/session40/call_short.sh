# Session 40's short device call (about 200 s), when little device time is left:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session40/call_short.sh > $OUT/call_short.log 2>&1
# GPT-2's loss graph alone three ways at once, one process each (memory is per process; the
# kernel lists are of one profiled forward and backward): ours and inductor; ours with the
# logits handed over as rows; ours with NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1. Beside them, the GPU
# tests for TESTS_S seconds (default 170).
nvidia-smi -L
timeout ${LOSS_S:-160} python3 -u scripts/gpu_loss_memory.py > $OUT/loss_default.log 2>&1 &
timeout ${LOSS_S:-160} python3 -u scripts/gpu_loss_memory.py --rows --backends nvfuser_dtensor > $OUT/loss_rows.log 2>&1 &
NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1 timeout ${LOSS_S:-160} python3 -u scripts/gpu_loss_memory.py --backends nvfuser_dtensor > $OUT/loss_views_out.log 2>&1 &
TESTS_S=${TESTS_S:-170} bash scripts/gpu_tests.sh > $OUT/gpu_tests_summary.txt
echo "== GPU tests"; cat $OUT/gpu_tests_summary.txt
wait
for f in loss_default loss_rows loss_views_out; do echo "#### $f"; grep -vi warn $OUT/$f.log | tail -16; done
