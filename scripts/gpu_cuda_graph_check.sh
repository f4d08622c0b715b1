#!/usr/bin/env bash
# One device call for issue 13's CUDA-graph runner (about 9 minutes), after
# `source .device/setup.sh`; results come back as $OUT/all.tgz plus the printed tables:
# 1. GPU tests of CUDA graphs (both runners), and the two changes of the last session that
#    never ran on a GPU (the world-1 TP global-view test, slice_scatter's strict xfail);
# 2. host cost per call (scripts/gpu_call_overhead.py: tiny bias+gelu, every backend, and a
#    profile of ours);
# 3. the fusion suite's small size against inductor and its reduce-overhead mode;
# 4. the zoo for ZOO_MODELS (default gpt2,llama,vit_s16: the models issue 13 names), ZOO_JOBS
#    at once, with our runner, cudagraph trees, inductor and reduce-overhead.
out="${OUT:-/tmp/gpu-cg}"; w="$out/work"
source scripts/gpu_prelude.sh "$w/logs"
timeout "${TESTS_TIMEOUT:-150}" python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_cuda_graphs.py \
  tests/test_cuda_graph_runner.py "tests/translators/test_shape.py::test_slice_scatter_of_a_size1_source" \
  "tests/distributed/test_tensor_parallel.py::test_global_view_opt_in_on_the_visible_gpus" > "$w/logs/gpu_tests.log" 2>&1
timeout 150 python3 scripts/gpu_call_overhead.py --calls 1000 > "$w/logs/call_overhead.log" 2>&1
sb="${SUITE_BUDGET:-70}"
timeout "$((sb + 40))" python3 -m benchmarks.run --device cuda --sizes small --dtype bfloat16 \
  --cases bias_gelu_tanh,layer_norm,rms_norm,softmax,add_layer_norm \
  --backends eager,inductor,inductor:reduce-overhead,nvfuser_dtensor,nvfuser_dtensor:cuda_graphs=trees \
  --budget-s "$sb" --out "$w/h200_small_own_cuda_graphs" > "$w/logs/suite_small.log" 2>&1
zt="${ZOO_TIMEOUT:-280}"
timeout "$zt" python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs "${ZOO_JOBS:-3}" \
  --models "${ZOO_MODELS:-gpt2,llama,vit_s16}" --timeout-s "$((zt - 10))" --warmup 3 --iters 10 \
  --backends "${ZOO_BACKENDS:-inductor,inductor:reduce-overhead,nvfuser_dtensor,nvfuser_dtensor:cuda_graphs=trees}" \
  --out "$w/h200_models_own_cuda_graphs" > "$w/logs/zoo.log" 2>&1
tar -czf "$out/all.tgz" -C "$w" .
echo "== GPU tests"; grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" "$w/logs/gpu_tests.log" | tail -12
echo "== call overhead"; grep -E "us/call|^\|" "$w/logs/call_overhead.log"; grep -B2 -A22 "Ordered by" "$w/logs/call_overhead.log" | cut -c1-150 | head -60
echo "== fusion suite, small"; sed -n '/All runs/,$p' "$w/h200_small_own_cuda_graphs/summary.md" 2>/dev/null | cut -c1-150
echo "== zoo"; grep -E "^- |^\| [a-z]" "$w/h200_models_own_cuda_graphs/summary.md" 2>/dev/null | cut -c1-260
python3 - "$w/h200_models_own_cuda_graphs/results.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    if r.get("cuda_graphs") is not None:
        print(r["case"], r["mode"], r["backend"], r["status"], r.get("step_ms"), r.get("peak_mem_mb"), r.get("kernels"), r.get("kernel_ms"), r["cuda_graphs"])
PY
rm -rf "$w"
