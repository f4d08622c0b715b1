# Session 29's third device call, at the tree where `cat` and `_to_copy` count as compute by default
# (Note [Data movement counted as compute]); every log under $OUT:
# 1. the GPU tests of that change (tests/test_pad_matmul.py);
# 2. ViT-S/16's kernels with the new default, then with nvFuser's `reuse_zeroed_memory` (its
#    grid reductions' int64 semaphores zeroed by one fill of a shared arena per launch instead of
#    one `at::zeros` per buffer: 98 FillFunctor<long> kernels per step in call 1);
# 3. where Llama's five `Memcpy DtoD` per step come from (without CUDA graphs, --regions names
#    the aten op that launched each kernel outside the regions).
nvidia-smi -L
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_pad_matmul.py > $OUT/tests.log 2>&1; tail -2 $OUT/tests.log
timeout 60 python3 scripts/gpu_top_kernels.py vit_s16 --backends nvfuser_dtensor --top 30 > $OUT/top_vit_s16.log 2>&1
NVFUSER_ENABLE=reuse_zeroed_memory timeout 60 python3 scripts/gpu_top_kernels.py vit_s16 --backends nvfuser_dtensor --top 30 > $OUT/top_vit_s16_reuse_zeroed.log 2>&1
grep -H "GPU activities\|FillFunctor<long>\|FillFunctor<unsigned" $OUT/top_vit_s16*.log | cut -c1-160
timeout 90 python3 scripts/gpu_top_kernels.py llama --backends nvfuser_dtensor:no_cuda_graphs --regions --top 30 > $OUT/regions_llama.log 2>&1
grep -i "memcpy\|copy" $OUT/regions_llama.log | cut -c1-240 | head -20
