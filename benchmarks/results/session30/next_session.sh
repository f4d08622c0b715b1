# The next device session's first call, prepared in session 30 (run from the project root):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session30/next_session.sh > $OUT/next_session.log 2>&1
# NVFUSER_DTENSOR_INPUT_FREE_INSIDE=1 (Note [Input-free inputs made inside], off): the zoo's
# models that read a value made from no input judged with it (each in its own process, ours
# only), then Llama's and T5's kernels with and without it, one process each, nothing else on
# the GPU. Make it the default if every row is ok and the kernels fall.
nvidia-smi -L
NVFUSER_DTENSOR_INPUT_FREE_INSIDE=1 timeout 260 python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs 3 \
  --models llama,mistral,qwen2,phi,t5,bart,resnet18 --modes train --timeout-s 245 --warmup 3 --iters 10 --backends nvfuser_dtensor \
  --out $OUT/zoo_input_free > $OUT/zoo_input_free.log 2>&1
python3 scripts/zoo_table.py $OUT/zoo_input_free/results.json | grep -E "^\| " | head -10
for m in llama t5; do
  timeout 75 python3 scripts/gpu_top_kernels.py $m --backends nvfuser_dtensor --top 30 > $OUT/top_$m.log 2>&1
  NVFUSER_DTENSOR_INPUT_FREE_INSIDE=1 timeout 75 python3 scripts/gpu_top_kernels.py $m --backends nvfuser_dtensor --top 30 > $OUT/top_${m}_input_free.log 2>&1
done
grep -H "GPU activities\|FillFunctor" $OUT/top_*.log | cut -c1-160
