# Session 28, call 3 (run from the project root on the device machine):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/h100_session28/call3.sh
# Where ViT-S/16's and Llama's training kernels lose to inductor's (goal 4's kernels-alone
# targets): the top kernels of both backends, one model at a time.
nvidia-smi -L
for m in vit_s16 llama; do
  echo "== $m training kernels"
  timeout 150 python3 scripts/gpu_top_kernels.py $m --backends inductor,nvfuser_dtensor --top 30 > $OUT/top_$m.log 2>&1
  grep "GPU activities" $OUT/top_$m.log
done
