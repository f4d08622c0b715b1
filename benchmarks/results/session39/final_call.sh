# Session 39's last device call (about 500 s; ARM_S=240 bounds each probe), on the package of its commit:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session39/final_call.sh > $OUT/final_call.log 2>&1
# 1. all at once, each in its own process (memory is per process; nothing is timed): the
#    memory of ResNet-18, ConvNeXt, GPT-2, Llama and BERT with and without our CUDA graphs,
#    step by step and per pool, each
#    judged against eager after its steps (scripts/gpu_memory_probe.py), and the loss graph
#    of GPT-2 alone (scripts/gpu_loss_memory.py);
# 2. every GPU test (call 1's 300 s at 8 workers left 5 of 478 not run), or TESTS.
start=$SECONDS
nvidia-smi -L
timeout -k 10 ${ARM_S:-300} python3 -u scripts/gpu_loss_memory.py > $OUT/loss_memory.log 2>&1 &
MODELS=${MODELS:-"resnet18 convnext gpt2 llama bert"} BACKENDS="nvfuser_dtensor nvfuser_dtensor:no_cuda_graphs" \
  bash "$(dirname "$0")/memory_call.sh"
wait
echo "#### loss graph alone"; cat $OUT/loss_memory.log | grep -vi warn | tail -40
echo "== probes done ($((SECONDS - start)) s)"
bash scripts/gpu_tests.sh > $OUT/gpu_tests_summary.txt
echo "== GPU tests ($((SECONDS - start)) s)"; cat $OUT/gpu_tests_summary.txt
