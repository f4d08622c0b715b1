#!/usr/bin/env bash
# Tensor-parallel runs on the GPU machine (after `source .device/setup.sh` and an install, e.g.
# by scripts/gpu_check.sh, whose pytest run covers the TP test worker), one rank per visible
# GPU: the example and the TP benchmarks.
#   bash scripts/gpu_tp.sh            # logs and results under $OUT (or /tmp/gpu-tp)
set -uo pipefail
out="${OUT:-/tmp/gpu-tp}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
n=$(python3 -c "import torch; print(torch.cuda.device_count())")
run() { echo "== $*"; timeout "${STEP_TIMEOUT:-240}" "$@"; echo "exit: $?"; }
run torchrun --standalone --nproc_per_node "$n" examples/tensor_parallel_mlp.py --device cuda --fuse-matmul \
  > "$out/tp-example.log" 2>&1; grep -vE "^W|Warning" "$out/tp-example.log" | tail -25
run torchrun --standalone --nproc_per_node "$n" -m benchmarks.run --device cuda --cases tp_mlp,tp_attention,sp_block \
  --sizes medium,large --dtype bfloat16 --iters 20 --out "$out/h200_tp$n" > "$out/tp-bench.log" 2>&1
grep -vE "Warning|^W|wait_tensor|WorkRegistry|before the output" "$out/tp-bench.log" | tail -30
