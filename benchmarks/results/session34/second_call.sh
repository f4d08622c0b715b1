# Session 34's second device call, if time is left after session33/final_call.sh (about 320 s):
#   source .device/setup.sh && bash benchmarks/results/session34/second_call.sh > $OUT/second_call.log 2>&1
# Training rows of the models short of a goal or whose first calls lean on the partition
# proposal (T5, ViT-S/16), against inductor and its reduce-overhead mode, each model in its
# own process: steps, memory and first-call parts (graphs s: Note [Partition proposals on bit masks]).
nvidia-smi -L
OUT=$OUT/zoo ZOO_MODELS=${ZOO_MODELS:-gpt2,llama,t5,vit_s16,phi} ZOO_MODES=train ZOO_JOBS=${ZOO_JOBS:-5} GPU_TESTS=none \
  ZOO_TIMEOUT=${ZOO_S:-300} OVERHEAD_TIMEOUT=0 TOP_KERNELS=0 timeout $((${ZOO_S:-300} + 20)) bash scripts/gpu_zoo_own_graphs.sh
