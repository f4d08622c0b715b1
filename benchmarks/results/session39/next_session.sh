# Prepared in session 39 for the next device session's first call (about 560 s), on the
# package of its commit:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session39/next_session.sh > $OUT/next_session.log 2>&1
# 1. every GPU test, with 12 workers and 330 s (session 39's call 1: 300 s at 8 workers left
#    5 of 478 not run; the package's CUDA-graph changes of session 39 ran only 73 of them);
# 2. memory per step and per pool (scripts/gpu_memory_probe.py), ours with and without CUDA
#    graphs, four processes at a time so that they finish compiling: ResNet-18 (fix 1 of
#    session 39, never measured: 1380 MB reserved at most with graphs, 896 without, before
#    it), BERT, BART and ConvNeXt;
# 3. beside the first of those, GPT-2's loss graph alone, as it is and with the logits handed
#    over viewed as rows (scripts/gpu_loss_memory.py --rows: does the float32 tensor between
#    nvFuser's segments go?).
start=$SECONDS
nvidia-smi -L
bash scripts/gpu_tests.sh > $OUT/gpu_tests_summary.txt
echo "== GPU tests ($((SECONDS - start)) s)"; cat $OUT/gpu_tests_summary.txt
(timeout 150 python3 -u scripts/gpu_loss_memory.py; timeout 100 python3 -u scripts/gpu_loss_memory.py --rows --backends nvfuser_dtensor) \
  > $OUT/loss_memory.log 2>&1 &
for models in "resnet18 bert" "bart convnext"; do
  left=$(( ${DEADLINE_S:-560} - (SECONDS - start) ))
  [ "$left" -gt 60 ] || { echo "== no time left for $models ($left s)"; continue; }
  ARM_S=$((left - 10)) MODELS="$models" BACKENDS="nvfuser_dtensor nvfuser_dtensor:no_cuda_graphs" \
    bash "$(dirname "$0")/memory_call.sh"
  echo "== $models ($((SECONDS - start)) s)"
done
wait
echo "#### GPT-2's loss graph alone"; grep -vi warn $OUT/loss_memory.log | tail -40
