# Session 40's first device call (about 560 s):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session40/call_1.sh > $OUT/call_1.log 2>&1
# 1. every GPU test (scripts/gpu_tests.sh: 12 workers, TESTS_S, default 330 s), and beside them
#    GPT-2's loss graph alone (scripts/gpu_loss_memory.py: ours and inductor; ours with the
#    logits handed over as rows; ours with NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1, Note [Views of
#    region inputs stay out]: does the float32 [tokens, vocabulary] tensor between nvFuser's
#    segments go?);
# 2. memory per step and per pool (session 39's memory_call.sh), ours with and without CUDA
#    graphs, for MODELS (default ResNet-18, whose fix 1 of session 39 never ran on a GPU, and
#    Llama, +10.4% at step 2 in session 39).
start=$SECONDS
nvidia-smi -L
(timeout 150 python3 -u scripts/gpu_loss_memory.py
 timeout 100 python3 -u scripts/gpu_loss_memory.py --rows --backends nvfuser_dtensor
 NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1 timeout 100 python3 -u scripts/gpu_loss_memory.py --backends nvfuser_dtensor) \
  > $OUT/loss_memory.log 2>&1 &
bash scripts/gpu_tests.sh > $OUT/gpu_tests_summary.txt
echo "== GPU tests ($((SECONDS - start)) s)"; cat $OUT/gpu_tests_summary.txt
wait
echo "#### GPT-2's loss graph alone ($((SECONDS - start)) s)"; grep -vi warn $OUT/loss_memory.log | tail -45
left=$(( ${DEADLINE_S:-560} - (SECONDS - start) ))
if [ "$left" -gt 90 ]; then
  ARM_S=$((left - 10)) MODELS="${MODELS:-resnet18 llama}" BACKENDS="nvfuser_dtensor nvfuser_dtensor:no_cuda_graphs" \
    bash benchmarks/results/session39/memory_call.sh
else
  echo "== no time left for the memory probes ($left s)"
fi
echo "== done ($((SECONDS - start)) s)"
