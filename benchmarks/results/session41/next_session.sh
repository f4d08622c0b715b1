# Prepared in session 41 for the next device session's first call (about 420 s), on the package
# of its commit:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session41/next_session.sh > $OUT/next_session.log 2>&1
# 1. GPT-2's loss graph alone four ways, one process each (memory is per process): ours and
#    inductor as they are; ours with NVFUSER_DTENSOR_CAST_WITHOUT_SET=1 (Note [Casts without a
#    set]) on the logits as rows, and on the logits as they come, without and with
#    NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1. Does the forward's 786 MB float32 tensor go?
# 2. Beside them, every GPU test with NVFUSER_DTENSOR_CAST_WITHOUT_SET=1 (12 workers, TESTS_S,
#    default 330 s): does the switch keep every test right on the GPU?
# The second call is call_2.sh: the zoo's training rows with an arm of both switches.
nvidia-smi -L
L=${LOSS_S:-200}
timeout $L python3 -u scripts/gpu_loss_memory.py > $OUT/loss_default.log 2>&1 &
NVFUSER_DTENSOR_CAST_WITHOUT_SET=1 timeout $L python3 -u scripts/gpu_loss_memory.py --rows --backends nvfuser_dtensor > $OUT/loss_cws_rows.log 2>&1 &
NVFUSER_DTENSOR_CAST_WITHOUT_SET=1 timeout $L python3 -u scripts/gpu_loss_memory.py --backends nvfuser_dtensor > $OUT/loss_cws.log 2>&1 &
NVFUSER_DTENSOR_CAST_WITHOUT_SET=1 NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1 timeout $L python3 -u scripts/gpu_loss_memory.py --backends nvfuser_dtensor > $OUT/loss_cws_views_out.log 2>&1 &
NVFUSER_DTENSOR_CAST_WITHOUT_SET=1 TESTS_S=${TESTS_S:-330} bash scripts/gpu_tests.sh > $OUT/gpu_tests_summary.txt
echo "== GPU tests with NVFUSER_DTENSOR_CAST_WITHOUT_SET=1"; tail -3 $OUT/gpu_tests_summary.txt
wait
for f in loss_default loss_cws_rows loss_cws loss_cws_views_out; do echo "#### $f"; grep -vi warn $OUT/$f.log | tail -14; done
