# Session 41's second device call (about 540 s):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session41/call_2.sh > $OUT/call_2.log 2>&1
# The zoo's training rows, every model in its own process (compiling at once, timed one at a
# time under one lock), ours against inductor and reduce-overhead (goals 4a, 4b, 5), and beside
# them an arm of ours with NVFUSER_DTENSOR_CAST_WITHOUT_SET=1 and NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1
# for ARM_MODELS (ARM_ENV: another arm): step time, memory and judgement against eager next to the default's.
start=$SECONDS
nvidia-smi -L
OUT=$OUT/zoo ZOO_MODES=train ZOO_JOBS=13 GPU_TESTS=none ZOO_TIMEOUT=${ZOO_S:-480} OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 \
  ARM_MODELS="${ARM_MODELS:-gpt2,llama,bert,vit_s16}" ARM_JOBS=4 \
  ARM_ENV="${ARM_ENV:-NVFUSER_DTENSOR_CAST_WITHOUT_SET=1 NVFUSER_DTENSOR_INPUT_VIEWS_OUT=1}" \
  bash scripts/gpu_zoo_own_graphs.sh
echo "== done ($((SECONDS - start)) s)"
