#!/usr/bin/env bash
# Tensor-parallel runs on the GPU machine (after `source .device/setup.sh` and an install, e.g.
# by scripts/gpu_check.sh, whose pytest run covers the TP test worker), one rank per visible
# GPU: every TP worker case on its own, with the backend's default options (WORKER_GLOBAL_VIEW=1
# for the global view), with a native backtrace from cuda-gdb for a case that fails, then the
# example and the TP benchmarks.
#   bash scripts/gpu_tp.sh            # logs and results under $OUT (or /tmp/gpu-tp)
#   TP_BENCH=0 bash scripts/gpu_tp.sh # without the benchmarks (TP_CASES=0: without the per-case runs)
#   TP_GLOBAL_CASES="tp_mlp sp_block" bash scripts/gpu_tp.sh   # also these cases in the global view
set -uo pipefail
out="${OUT:-/tmp/gpu-tp}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
n=$(python3 -c "import torch; print(torch.cuda.device_count())")
run() { echo "== $*"; timeout "${STEP_TIMEOUT:-240}" "$@"; echo "exit: $?"; }

cases="tp_mlp tp_mlp_fused_matmul tp_attention tp_attention_local_output sp_block dtensor_function"
case "${TP_CASES:-1}" in 1) ;; 0) cases="" ;; *) cases="$TP_CASES" ;; esac  # 1: all, 0: none, or a list
for c in $cases; do
  WORKER_DEVICE=cuda run torchrun --standalone --nproc_per_node "$n" tests/distributed/tp_worker.py "$c" \
    > "$out/tp-$c.log" 2>&1
  if grep -q "^PASS $c" "$out/tp-$c.log"; then
    grep "^PASS $c" "$out/tp-$c.log" | head -1
  else
    echo "FAIL $c:"; grep -vE "^W|Warning" "$out/tp-$c.log" | tail -15
    # One rank without torchrun, under cuda-gdb, for the native stack of a crash.
    if command -v cuda-gdb > /dev/null && [ "$n" -ge 1 ]; then
      RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=localhost MASTER_PORT=29611 \
        WORKER_DEVICE=cuda timeout 200 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex bt \
        --args python3 tests/distributed/tp_worker.py "$c" > "$out/gdb-$c.log" 2>&1
      grep -E "^#[0-9]+ " "$out/gdb-$c.log" | head -30
    fi
  fi
done

# The global view (opt-in on CUDA, Note [Global view]), each case once, without a debugger.
for c in ${TP_GLOBAL_CASES:-}; do
  WORKER_DEVICE=cuda WORKER_GLOBAL_VIEW=1 run torchrun --standalone --nproc_per_node "$n" tests/distributed/tp_worker.py "$c" \
    > "$out/tp-global-$c.log" 2>&1
  grep "^PASS $c" "$out/tp-global-$c.log" | head -1 || { echo "FAIL $c (global view):"; grep -vE "^W|Warning" "$out/tp-global-$c.log" | tail -12; }
done

run torchrun --standalone --nproc_per_node "$n" examples/tensor_parallel_mlp.py --device cuda --fuse-matmul \
  > "$out/tp-example.log" 2>&1; grep -vE "^W|Warning" "$out/tp-example.log" | tail -25
if [ "${TP_BENCH:-1}" = 1 ]; then
  run torchrun --standalone --nproc_per_node "$n" -m benchmarks.run --device cuda --cases tp_mlp,tp_attention,sp_block \
    --sizes medium,large --dtype bfloat16 --iters 20 --out "$out/h200_tp$n" \
    --backends "${TP_BACKENDS:-eager,inductor,nvfuser_dtensor,nvfuser_dtensor:global_view+fuse_matmul}" ${TP_BENCH_ARGS:-} > "$out/tp-bench.log" 2>&1
  grep -vE "Warning|^W|wait_tensor|WorkRegistry|before the output" "$out/tp-bench.log" | tail -30
fi
