#!/usr/bin/env bash
# The full benchmark suite on the H200, resumable across device calls (each < 10 min):
#   source .device/setup.sh && bash scripts/gpu_bench.sh [extra benchmarks.run args]
# Installs the project offline, then runs the suite into $OUT/h200 for at most $BENCH_BUDGET_S
# seconds (whole case groups only). Copy $OUT/h200 to benchmarks/results/h200/, carry that
# folder into the next call and run the same command again: --resume skips the finished runs.
set -uo pipefail
out="${OUT:-/tmp/gpu-bench}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation . > "$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
dest="$out/h200"; mkdir -p "$dest"
[ -f benchmarks/results/h200/results.json ] && cp benchmarks/results/h200/results.json "$dest/"
cases=bias_gelu_tanh,bias_gelu_exact,layer_norm,rms_norm,softmax,add_layer_norm
cases=$cases,swiglu_mlp,causal_attention,transformer_block,gpt2_stack,llama_stack
timeout "${BENCH_TIMEOUT_S:-570}" python3 -m benchmarks.run --device cuda --dtype float32,bfloat16 --iters 30 \
  --cases "$cases" --sizes small,medium,large --out "$dest" --append --resume \
  --budget-s "${BENCH_BUDGET_S:-420}" "$@" 2>&1 | grep -v Warning > "$out/bench.log"
grep -E "budget|wrote|Error" "$out/bench.log" | tail -5
tail -c 6000 "$out/bench.log"
