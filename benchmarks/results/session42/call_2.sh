# Session 42's second device call (about 540 s), on the package of its commit:
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session42/call_2.sh > $OUT/call_2.log 2>&1
# The zoo's training rows, every model in its own process (compiling at once, timed one at a
# time under one lock), ours against inductor and reduce-overhead (goals 4a, 4b, 5), and beside
# them an A/B arm of ours for ARM_MODELS with ARM_ENV (default: NVFUSER_DTENSOR_CAST_WITHOUT_SET=0,
# the package before Note [Casts without a set] became the default): step time, memory and the
# judgement against eager next to the default's.
start=$SECONDS
nvidia-smi -L
OUT=$OUT/zoo ZOO_MODES=train ZOO_JOBS=13 GPU_TESTS=none ZOO_TIMEOUT=${ZOO_S:-480} OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 \
  ARM_MODELS="${ARM_MODELS:-gpt2,llama,bert,vit_s16}" ARM_JOBS=4 \
  ARM_ENV="${ARM_ENV:-NVFUSER_DTENSOR_CAST_WITHOUT_SET=0}" \
  bash scripts/gpu_zoo_own_graphs.sh
echo "== done ($((SECONDS - start)) s)"
