# Session 29's second device call: Llama's training kernels against inductor's (goal 4's
# kernels-alone target), and where bert_dropout's aten copies outside the regions come from
# (--regions names the aten op that launched each kernel outside a region).
nvidia-smi -L
timeout 110 python3 scripts/gpu_top_kernels.py llama --backends inductor,nvfuser_dtensor --top 30 > $OUT/top_llama.log 2>&1
grep "GPU activities" $OUT/top_llama.log
timeout 110 python3 scripts/gpu_top_kernels.py bert_dropout --backends nvfuser_dtensor:no_cuda_graphs --regions --top 30 > $OUT/regions_bert_dropout.log 2>&1
grep -i "copy" $OUT/regions_bert_dropout.log | head -20
# GPT-2's backward stacks its qkv gradients too (Conv1D's c_attn): the same A/B as ViT's in call 1
timeout 100 python3 scripts/gpu_top_kernels.py gpt2 --backends nvfuser_dtensor --top 30 > $OUT/top_gpt2.log 2>&1
NVFUSER_DTENSOR_MOVE_KERNELS=cat timeout 100 python3 scripts/gpu_top_kernels.py gpt2 --backends nvfuser_dtensor --top 30 > $OUT/top_gpt2_cat.log 2>&1
grep "GPU activities" $OUT/top_gpt2*.log
