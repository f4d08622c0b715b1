# Session 30, device call 2 (run from the project root, every log under $OUT):
#   source .device/setup.sh && source scripts/gpu_prelude.sh $OUT/prelude && bash benchmarks/results/session30/call2.sh > $OUT/call2.log 2>&1
# 1. Llama's kernels with NVFUSER_DTENSOR_TANGENTS_IN_PLACE=1 against without, and the zoo's
#    Llama and RoBERTa with it (session 29's next_session_2.sh, without its bert_dropout --regions);
# 2. T5's kernels with and without NVFUSER_DTENSOR_MOVE_KERNELS=cat,_to_copy, one process each
#    and nothing else on the GPU (call 1's zoo arm measured them next to two other models).
nvidia-smi -L
timeout 70 python3 scripts/gpu_top_kernels.py llama --backends nvfuser_dtensor --top 30 > $OUT/top_llama.log 2>&1
NVFUSER_DTENSOR_TANGENTS_IN_PLACE=1 timeout 70 python3 scripts/gpu_top_kernels.py llama --backends nvfuser_dtensor --top 30 > $OUT/top_llama_tangents_in_place.log 2>&1
grep -H "GPU activities\|Memcpy" $OUT/top_llama*.log | cut -c1-160
timeout 80 python3 scripts/gpu_top_kernels.py t5 --backends nvfuser_dtensor --top 30 > $OUT/top_t5.log 2>&1
NVFUSER_DTENSOR_MOVE_KERNELS=cat,_to_copy timeout 80 python3 scripts/gpu_top_kernels.py t5 --backends nvfuser_dtensor --top 30 > $OUT/top_t5_to_copy.log 2>&1
grep -H "GPU activities" $OUT/top_t5*.log | cut -c1-160
NVFUSER_DTENSOR_TANGENTS_IN_PLACE=1 timeout 200 python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs 2 \
  --models llama,roberta --modes train --warmup 3 --iters 10 --backends nvfuser_dtensor --out $OUT/zoo_tangents > $OUT/zoo_tangents.log 2>&1
python3 scripts/zoo_table.py $OUT/zoo_tangents/results.json | grep -E "^\| " | head -8
