# The next device session's second call (prepared in session 29), every log under $OUT:
# 1. Llama's kernels with `NVFUSER_DTENSOR_TANGENTS_IN_PLACE=1` against without (Note [Tangents
#    read in place], off since session 22, where it was right on BERT, RoBERTa, BART and T5 and
#    saved 240-1078 MB reserved, but never timed alone). Llama's backward recording copies the
#    logits' tangent ([8, 512, 32000] bf16, 262 MB) on every replay: most likely the five
#    `Memcpy DtoD` of session 29 (0.18 ms, the whole gap to inductor's 4.24 ms). On the CPU
#    stand-in (scripts/cpu_runner_zoo.py, tiny Llama with the threshold lowered) the switch
#    removes that copy and the step stays exact. Turn it on if the kernels fall and the zoo
#    stays right.
# 2. where bert_dropout's five strided `direct_copy` kernels (0.35 ms) come from: without CUDA
#    graphs, --regions names the aten op that launched each kernel outside the regions.
nvidia-smi -L
timeout 70 python3 scripts/gpu_top_kernels.py llama --backends nvfuser_dtensor --top 30 > $OUT/top_llama.log 2>&1
NVFUSER_DTENSOR_TANGENTS_IN_PLACE=1 timeout 70 python3 scripts/gpu_top_kernels.py llama --backends nvfuser_dtensor --top 30 > $OUT/top_llama_tangents_in_place.log 2>&1
grep -H "GPU activities\|Memcpy" $OUT/top_llama*.log | cut -c1-160
NVFUSER_DTENSOR_TANGENTS_IN_PLACE=1 timeout 200 python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs 2 \
  --models llama,roberta --modes train --warmup 3 --iters 10 --backends nvfuser_dtensor --out $OUT/zoo_tangents > $OUT/zoo_tangents.log 2>&1
python3 scripts/zoo_table.py $OUT/zoo_tangents/results.json | grep -E "^\| " | head -8
timeout 100 python3 scripts/gpu_top_kernels.py bert_dropout --backends nvfuser_dtensor:no_cuda_graphs --regions --top 30 > $OUT/regions_bert_dropout.log 2>&1
grep -i "copy" $OUT/regions_bert_dropout.log | cut -c1-240 | head -20
