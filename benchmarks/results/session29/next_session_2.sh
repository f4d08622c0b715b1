# The next device session's second call (prepared in session 29): where Llama's five
# `Memcpy DtoD` (0.18 ms per step, none in inductor's step) and bert_dropout's five strided
# `direct_copy` kernels (0.35 ms) come from. Without CUDA graphs, --regions names the aten op
# that launched each kernel outside the regions; the CUDA-graph runner's own copies (inputs
# whose address changed) then do not show, so a copy seen only with graphs is the runner's.
nvidia-smi -L
timeout 100 python3 scripts/gpu_top_kernels.py llama --backends nvfuser_dtensor:no_cuda_graphs --regions --top 30 > $OUT/regions_llama.log 2>&1
grep -i "memcpy\|copy" $OUT/regions_llama.log | cut -c1-240 | head -20
timeout 100 python3 scripts/gpu_top_kernels.py bert_dropout --backends nvfuser_dtensor:no_cuda_graphs --regions --top 30 > $OUT/regions_bert_dropout.log 2>&1
grep -i "copy" $OUT/regions_bert_dropout.log | cut -c1-240 | head -20
