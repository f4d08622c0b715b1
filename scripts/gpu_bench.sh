#!/usr/bin/env bash
# The full benchmark suite on the H200 in parts that each fit one device call (< 10 min),
# merged into one results folder with --append:
#   source .device/setup.sh && bash scripts/gpu_bench.sh 1     # then 2, then 3
# Each part installs the project offline and leaves results.json/csv, plots and summary.md
# under $OUT/h200 (copy them to benchmarks/results/h200/ and carry that folder into the
# next part as benchmarks/results/h200 so --append sees the earlier rows).
set -uo pipefail
out="${OUT:-/tmp/gpu-bench}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation . > "$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
dest="$out/h200"; mkdir -p "$dest"
[ -f benchmarks/results/h200/results.json ] && cp benchmarks/results/h200/results.json "$dest/"
fusion=bias_gelu_tanh,bias_gelu_exact,layer_norm,rms_norm,softmax,add_layer_norm
models=swiglu_mlp,causal_attention,transformer_block,gpt2_stack,llama_stack
case "${1:-1}" in
  1) args=(--cases "$fusion" --sizes small,medium,large) ;;
  2) args=(--cases "$models" --sizes small,large) ;;
  3) args=(--cases "$models" --sizes medium) ;;
  *) echo "part must be 1, 2 or 3"; exit 2 ;;
esac
timeout 560 python3 -m benchmarks.run --device cuda --dtype float32,bfloat16 --iters 30 "${args[@]}" \
  --out "$dest" --append 2>&1 | grep -v Warning | tee "$out/bench-part${1:-1}.log" | tail -60
