# Session 30, device call 1 (run from the project root, every log under $OUT):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session30/call1.sh > $OUT/call1.log 2>&1
# session 29's next_session.sh (every GPU test, the zoo's bert_dropout / T5 / ViT-S/16 training
# with an arm under MOVE_KERNELS=cat,_to_copy, ViT's kernels with and without nvFuser's
# reuse_zeroed_memory), plus ViT's kernels with the LayerNorm column sums in two stages
# (NVFUSER_DTENSOR_LN_BACKWARD=staged, Note [LayerNorm backward in two kernels]).
bash benchmarks/results/session29/next_session.sh
NVFUSER_DTENSOR_LN_BACKWARD=staged timeout 60 python3 scripts/gpu_top_kernels.py vit_s16 --backends nvfuser_dtensor --top 30 > $OUT/top_vit_s16_ln_staged.log 2>&1
grep -H "GPU activities\|FillFunctor<long>\|reduction" $OUT/top_vit_s16_ln_staged.log | cut -c1-160
