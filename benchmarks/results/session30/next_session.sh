# The next device session's first call, prepared in session 30 (run from the project root):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session30/next_session.sh > $OUT/next_session.log 2>&1
# Session 30's two new A/B switches, both off, judged by the zoo (each model in its own
# process, ours only, two arms side by side) and timed by the top kernels (one process each,
# nothing else on the GPU). Make a switch the default where every row is ok and the kernels fall.
# - NVFUSER_DTENSOR_INPUT_FREE_INSIDE=1 (Note [Input-free inputs made inside]): the models
#   whose regions read values made from no input; Llama's kernels (four bf16 fills, 0.10 ms).
# - NVFUSER_DTENSOR_PATCH_CONV_AS_MM=1 (Note [Patch convolutions as matrix products]): ViT-S/16
#   and ConvNeXt-T, training and inference; ViT's kernels (its patch embedding 0.34 ms).
nvidia-smi -L
timeout 120 python3 -m pytest -q -p no:cacheprovider $(tail -2 scripts/gpu_tests.txt) > $OUT/switch_tests.log 2>&1; tail -1 $OUT/switch_tests.log
NVFUSER_DTENSOR_INPUT_FREE_INSIDE=1 timeout 270 python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs 3 \
  --models llama,mistral,qwen2,phi,t5,bart,resnet18 --modes train --timeout-s 255 --warmup 3 --iters 10 --backends nvfuser_dtensor \
  --out $OUT/zoo_input_free > $OUT/zoo_input_free.log 2>&1 &
NVFUSER_DTENSOR_PATCH_CONV_AS_MM=1 timeout 270 python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs 2 \
  --models vit_s16,convnext --modes train,infer --timeout-s 255 --warmup 3 --iters 10 --backends nvfuser_dtensor \
  --out $OUT/zoo_patch_conv > $OUT/zoo_patch_conv.log 2>&1 &
wait
for arm in input_free patch_conv; do python3 scripts/zoo_table.py $OUT/zoo_$arm/results.json | grep -E "^\| " | head -10; done
timeout 70 python3 scripts/gpu_top_kernels.py llama --backends nvfuser_dtensor --top 80 > $OUT/top_llama.log 2>&1
NVFUSER_DTENSOR_INPUT_FREE_INSIDE=1 timeout 70 python3 scripts/gpu_top_kernels.py llama --backends nvfuser_dtensor --top 80 > $OUT/top_llama_input_free.log 2>&1
timeout 65 python3 scripts/gpu_top_kernels.py vit_s16 --backends nvfuser_dtensor --top 100 > $OUT/top_vit_s16.log 2>&1
NVFUSER_DTENSOR_PATCH_CONV_AS_MM=1 timeout 65 python3 scripts/gpu_top_kernels.py vit_s16 --backends nvfuser_dtensor --top 100 > $OUT/top_vit_s16_patch_conv.log 2>&1
grep -H "GPU activities\|FillFunctor<c10::BFloat16>\|convolve\|nchwToNhwc" $OUT/top_*.log | cut -c1-160
