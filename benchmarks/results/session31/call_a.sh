# Session 31's first device call (run from the project root; about 420 s):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session31/call_a.sh > $OUT/call_a.log 2>&1
# Three A/B switches, all off by default, each judged by the zoo (our backend only, training,
# each model in its own process, every arm side by side; steps timed one at a time on one
# lock): rows ok, first calls, kernels, reserved memory; then ViT-S/16's top kernels with and
# without the patch convolutions as matrix products, one process per arm, nothing else on the GPU.
# - NVFUSER_DTENSOR_SPLIT_FAR=1 (Note [Parts of a region far apart], new): memory, first calls.
# - NVFUSER_DTENSOR_INPUT_FREE_INSIDE=1 (session 30): Llama's four bf16 fills (0.10 ms).
# - NVFUSER_DTENSOR_PATCH_CONV_AS_MM=1 (session 30): ViT's patch embedding (0.34 ms).
nvidia-smi -L
lock=$OUT/timing.lock
zoo() {  # $1 arm name, $2 env assignment, $3 models
  env $2 timeout 270 python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs 6 --models "$3" \
    --modes train --timeout-s 255 --warmup 3 --iters 10 --backends nvfuser_dtensor --timing-lock "$lock" \
    --out "$OUT/zoo_$1" > "$OUT/zoo_$1.log" 2>&1
}
zoo default NVFUSER_DTENSOR_NONE=0 vit_s16,gpt2,llama,t5,bert &
zoo split_far NVFUSER_DTENSOR_SPLIT_FAR=1 vit_s16,gpt2,llama,t5,bert &
zoo input_free NVFUSER_DTENSOR_INPUT_FREE_INSIDE=1 llama,t5 &
zoo patch_conv NVFUSER_DTENSOR_PATCH_CONV_AS_MM=1 vit_s16,convnext &
wait
for arm in default split_far input_free patch_conv; do echo "== $arm"; python3 scripts/zoo_table.py $OUT/zoo_$arm/results.json | grep -E "^\| "; done
timeout 60 python3 scripts/gpu_top_kernels.py vit_s16 --backends nvfuser_dtensor --top 100 > $OUT/top_vit_s16.log 2>&1
NVFUSER_DTENSOR_PATCH_CONV_AS_MM=1 timeout 60 python3 scripts/gpu_top_kernels.py vit_s16 --backends nvfuser_dtensor --top 100 > $OUT/top_vit_s16_patch_conv.log 2>&1
grep -H "GPU activities\|FillFunctor<c10::BFloat16>\|convolve\|nchwToNhwc" $OUT/top_*.log | cut -c1-160
