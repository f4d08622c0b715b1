# Session 39, goal 5 of issue 13: where the training step's memory sits, per pool and per step,
# ours with and without CUDA graphs against inductor and reduce-overhead. Every arm in its own
# process, all at once (memory is per process; no timing is taken here):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session39/memory_call.sh
MODELS=${MODELS:-"resnet18 gpt2"}
BACKENDS=${BACKENDS:-"nvfuser_dtensor nvfuser_dtensor:no_cuda_graphs inductor:reduce-overhead inductor"}
logs=()
for m in $MODELS; do
  for b in $BACKENDS; do
    logs+=("$OUT/memory_${m}_${b//:/_}.log")
    timeout -k 10 ${ARM_S:-400} python3 -u scripts/gpu_memory_probe.py $m --backend $b > "${logs[-1]}" 2>&1 &
  done
done
wait
for f in "${logs[@]}"; do echo "#### $(basename $f)"; grep -E "^(==|--)" "$f"; grep -m3 -iE "error|Traceback" "$f"; done
