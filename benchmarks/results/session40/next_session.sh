# Prepared in session 40 (no device call ran: fourteen starts failed, one machine was taken
# back before any output, three tries were refused) for the next device session's first call
# (about 560 s), on the package of its commit:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session40/next_session.sh > $OUT/next_session.log 2>&1
# 1. GPT-2's loss graph alone three ways, one process each, beside every GPU test (12 workers,
#    TESTS_S, default 330 s): does NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1 take the 786 MB float32
#    tensor out of the loss forward (call_short.sh)?
# 2. with what is left, memory per step of ResNet-18 and Llama, ours with and without CUDA
#    graphs (session 39's memory_call.sh; ResNet-18's fix 1 of session 39 never ran on a GPU).
# The second call is call_2.sh: the zoo's training rows with an INPUT_VIEWS_OUT arm.
start=$SECONDS
LOSS_S=${LOSS_S:-200} TESTS_S=${TESTS_S:-330} bash "$(dirname "$0")/call_short.sh"
echo "== GPU tests and the loss ($((SECONDS - start)) s)"
left=$(( ${DEADLINE_S:-560} - (SECONDS - start) ))
if [ "$left" -gt 90 ]; then
  ARM_S=$((left - 10)) MODELS="${MODELS:-resnet18 llama}" BACKENDS="nvfuser_dtensor nvfuser_dtensor:no_cuda_graphs" \
    bash benchmarks/results/session39/memory_call.sh
else
  echo "== no time left for the memory probes ($left s)"
fi
echo "== done ($((SECONDS - start)) s)"
