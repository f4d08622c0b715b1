# Session 29's second device call (run from the project root, after the prelude; every log under $OUT):
# 1. Llama's training kernels against inductor's (goal 4's kernels-alone target);
# 2. A/B of `NVFUSER_DTENSOR_MOVE_KERNELS` (ops counted as compute, so that a region of only
#    them is one nvFuser kernel instead of PyTorch's copies), one process per arm:
#    - GPT-2's backward stacks its qkv gradients (Conv1D's c_attn): `cat`;
#    - bert_dropout's attention context is cast from float32, transposed and made contiguous
#      (forward and backward, 2 per layer), two PyTorch kernels each: `_to_copy`;
# 3. where bert_dropout's aten copies outside the regions come from (--regions names the aten
#    op that launched each kernel outside a region), with REGIONS=1 only (100 s more).
nvidia-smi -L
timeout 110 python3 scripts/gpu_top_kernels.py llama --backends inductor,nvfuser_dtensor --top 30 > $OUT/top_llama.log 2>&1
timeout 75 python3 scripts/gpu_top_kernels.py gpt2 --backends nvfuser_dtensor --top 30 > $OUT/top_gpt2.log 2>&1
NVFUSER_DTENSOR_MOVE_KERNELS=cat timeout 75 python3 scripts/gpu_top_kernels.py gpt2 --backends nvfuser_dtensor --top 30 > $OUT/top_gpt2_cat.log 2>&1
timeout 75 python3 scripts/gpu_top_kernels.py bert_dropout --backends nvfuser_dtensor --top 30 > $OUT/top_bert_dropout.log 2>&1
NVFUSER_DTENSOR_MOVE_KERNELS=_to_copy timeout 75 python3 scripts/gpu_top_kernels.py bert_dropout --backends nvfuser_dtensor --top 30 > $OUT/top_bert_dropout_to_copy.log 2>&1
grep "GPU activities" $OUT/top_*.log
[ -n "${REGIONS:-}" ] && timeout 100 python3 scripts/gpu_top_kernels.py bert_dropout --backends nvfuser_dtensor:no_cuda_graphs --regions --top 30 > $OUT/regions_bert_dropout.log 2>&1
grep -i "copy" $OUT/regions_bert_dropout.log | head -20
