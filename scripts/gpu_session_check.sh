#!/usr/bin/env bash
# One device call that checks a session's work on the H200 (about 9 minutes), after
# `source .device/setup.sh`; everything comes back as $OUT/all.tgz (the device returns only
# a few files) plus the printed tables:
# - issue 12/13: the model zoo with default options (eager, inductor, inductor
#   reduce-overhead, nvfuser_dtensor: CUDA graphs on by default) and with fuse_matmul=True
#   (eager, nvfuser_dtensor:fuse_matmul), all 13 models at once next to the GPU tests of
#   CUDA graphs, layouts and translators, so step times are rough;
# - issue 14: the TP cases on the global view against eager DTensor (the opt-in GPU test)
#   and the SP block with fuse_matmul at the medium size (regions nvFuser rejects show in
#   the "fallbacks" column);
# - issue 13: the fusion suite's small size (call overhead; tiny bias+gelu) against inductor
#   and its reduce-overhead mode.
# SESSION_ZOO_TIMEOUT, SESSION_SUITE_BUDGET override the bounds.
out="${OUT:-/tmp/gpu-session}"; w="$out/work"
source scripts/gpu_prelude.sh "$w/logs"
zt="${SESSION_ZOO_TIMEOUT:-300}"
zoo() {  # zoo NAME BACKENDS
  timeout "$zt" python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --jobs 13 \
    --timeout-s "$((zt - 15))" --warmup 3 --iters 10 --backends "$2" --out "$w/$1" > "$w/logs/$1.log" 2>&1
}
zoo h200_models eager,inductor,inductor:reduce-overhead,nvfuser_dtensor &
zoo h200_models_fuse_matmul eager,nvfuser_dtensor:fuse_matmul &
timeout "$zt" python3 -m pytest -q -p no:cacheprovider -rfE tests/test_cuda_graphs.py tests/test_gpu_layouts.py \
  tests/test_layouts.py tests/translators/test_linalg.py tests/translators/test_shape.py tests/test_pad_matmul.py \
  > "$w/logs/gpu_tests.log" 2>&1 &
wait
timeout 100 python3 -m pytest -q -p no:cacheprovider -rfEs \
  "tests/distributed/test_tensor_parallel.py::test_global_view_opt_in_on_the_visible_gpus" > "$w/logs/tp_tests.log" 2>&1
timeout 80 torchrun --standalone --nproc_per_node 1 -m benchmarks.run --device cuda --cases sp_block \
  --sizes medium --dtype bfloat16 --modes fwd,fwd+bwd --iters 5 --backends nvfuser_dtensor:global_view+fuse_matmul \
  --out "$w/h200_tp1_sp_fuse_matmul" > "$w/logs/sp_fuse_matmul.log" 2>&1
sb="${SESSION_SUITE_BUDGET:-100}"
timeout "$((sb + 30))" python3 -m benchmarks.run --device cuda --sizes small --dtype bfloat16 \
  --cases bias_gelu_tanh,layer_norm,rms_norm,softmax,add_layer_norm --backends eager,inductor,inductor:reduce-overhead,nvfuser_dtensor \
  --budget-s "$sb" --out "$w/h200_small_cuda_graphs" > "$w/logs/suite_small.log" 2>&1
tar -czf "$out/all.tgz" -C "$w" . && rm -rf "$w/logs"
for z in h200_models h200_models_fuse_matmul; do echo "== $z"; grep -E "^- nvfuser|^\| [a-z]" "$w/$z/summary.md" | cut -d'|' -f2-8,10,12,15,16 | cut -c1-200; done
echo "== GPU tests"; tar -xzOf "$out/all.tgz" ./logs/gpu_tests.log | grep -E "^(FAILED|ERROR)|passed|failed" | tail -8
echo "== TP global view test"; tar -xzOf "$out/all.tgz" ./logs/tp_tests.log | grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed|skipped" | tail -4
echo "== SP block, fuse_matmul"; tar -xzOf "$out/all.tgz" ./logs/sp_fuse_matmul.log | grep -oE "runs in PyTorch: .{0,160}" | sort | uniq -c | head -4
sed -n '/All runs/,$p' "$w/h200_tp1_sp_fuse_matmul/summary.md" 2>/dev/null | cut -c1-160
echo "== fusion suite, small"; sed -n '/All runs/,$p' "$w/h200_small_cuda_graphs/summary.md" 2>/dev/null | cut -c1-150
rm -rf "$w"
