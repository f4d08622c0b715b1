# Session 40's first device call (about 560 s):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session40/call_1.sh > $OUT/call_1.log 2>&1
# Session 39's next_session.sh (every GPU test, memory of ResNet-18, BERT, BART and ConvNeXt
# with and without our CUDA graphs, GPT-2's loss alone with and without --rows), and beside
# it GPT-2's loss alone with NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1 (Note [Views of region inputs
# stay out]): does the float32 [tokens, vocabulary] tensor between nvFuser's segments go?
(NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1 timeout 200 python3 -u scripts/gpu_loss_memory.py --backends nvfuser_dtensor \
  > $OUT/loss_views_out.log 2>&1) &
bash benchmarks/results/session39/next_session.sh
wait
echo "#### GPT-2's loss graph alone, NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1"; grep -vi warn $OUT/loss_views_out.log | tail -20
