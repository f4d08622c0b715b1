#!/usr/bin/env bash
# A short GPU check of what changed last (about 5 minutes), on the device machine after
# `source .device/setup.sh`, everything at once, each model in its own process:
# - training steps of the models the last changes touch, default options: GPT-2 (padded LM
#   head GEMMs, Note [Padded matmuls]), Llama (rotary backward regions, Note [Mixed input
#   layouts with several outputs]), ConvNeXt (channels_last rule), ViT-S/16 (one definition
#   per repeated layer, Note [Fusion cache key]), ResNet-18 (batch norm in nvFuser);
# - ViT-S/16 and T5 with fuse_matmul=True (Note [One matmul per region]: they took more than
#   420 s to compile before);
# - GPT-2 and RoBERTa with NVFUSER_DTENSOR_GATHER_EXPERIMENT=segment_set (their loss regions
#   fall back with validation.cpp:1559: does a segment_set before the gather let them
#   compile?), BERT and RoBERTa with =take_along_axis (their embedding regions fall back with
#   transform_replay.cpp:302), docs/nvfuser_faults.md item 7;
# - the GPU tests of the translators and layouts changed last;
# - then, alone on the GPU (QUICK_TP=0 skips it, QUICK_TP_TIMEOUT bounds it): the global view
#   on local tensors (Note [Local execution of the global view]) for issue 14, point 2: the
#   TP cases on the GPU in the global view against eager DTensor, and the TP benchmark of the
#   global view on local tensors vs through DTensor vs the local path vs inductor, and with
#   fuse_matmul (its SP block fell back at medium/large: Note [Sharded reshapes stay out of
#   fusions]; the "fallbacks" column).
# QUICK_MODELS, QUICK_FM_MODELS and QUICK_TIMEOUT override. Logs under $OUT.
set -uo pipefail
out="${OUT:-/tmp/gpu-quick}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t="${QUICK_TIMEOUT:-300}"
python3 -m pip install -q --no-deps --no-build-isolation . > "$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
zoo() {  # zoo NAME MODELS BACKENDS
  timeout "$t" python3 -m benchmarks.models --device cuda --dtype bfloat16 --size real --models "$2" --modes train \
    --backends "$3" --jobs 4 --timeout-s "$((t - 10))" --warmup 3 --iters 10 --out "$out/$1" > "$out/$1.log" 2>&1
}
zoo default "${QUICK_MODELS:-gpt2,llama,convnext,vit_s16,resnet18}" eager,inductor,nvfuser_dtensor &
zoo fuse_matmul "${QUICK_FM_MODELS:-vit_s16,t5}" eager,nvfuser_dtensor:fuse_matmul &
NVFUSER_DTENSOR_GATHER_EXPERIMENT=segment_set zoo gather_segment_set gpt2,roberta eager,nvfuser_dtensor &
NVFUSER_DTENSOR_GATHER_EXPERIMENT=take_along_axis zoo gather_take_along_axis bert,roberta eager,nvfuser_dtensor &
timeout "$t" python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_layouts.py tests/test_pad_matmul.py \
  tests/test_cuda_graphs.py > "$out/tests.log" 2>&1 &
wait
for z in default fuse_matmul gather_segment_set gather_take_along_axis; do echo "== $z"; grep -E "^\[" "$out/$z.log"; grep -E "^\| " "$out/$z/summary.md" 2>/dev/null | cut -c1-260; done
echo "== tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -12

if [ "${QUICK_TP:-1}" = 1 ]; then
  tt="${QUICK_TP_TIMEOUT:-240}"
  python3 scripts/gpu_nvfuser_abi_fix.py > "$out/abi_fix.log" 2>&1; tail -2 "$out/abi_fix.log"
  timeout 100 python3 -m pytest -q -p no:cacheprovider -rfE \
    "tests/distributed/test_tensor_parallel.py::test_global_view_opt_in_on_the_visible_gpus" > "$out/tp_tests.log" 2>&1
  echo "== tp tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tp_tests.log" | tail -5
  timeout "$tt" torchrun --standalone --nproc_per_node 1 -m benchmarks.run --device cuda \
    --cases tp_mlp,tp_attention,sp_block --sizes medium,large --dtype bfloat16 --iters 20 --budget-s "$((tt - 40))" \
    --backends eager,inductor,nvfuser_dtensor,nvfuser_dtensor:global_view,nvfuser_dtensor:global_view+dtensor_runtime,nvfuser_dtensor:global_view+fuse_matmul \
    --out "$out/h200_tp1_local_execution" > "$out/tp_bench.log" 2>&1
  echo "== tp bench"; sed -n '/All runs/,$p' "$out/h200_tp1_local_execution/summary.md" 2>/dev/null | cut -c1-200
  # The global view against the local path (issue 14, point 2), calls interleaved.
  timeout 150 torchrun --standalone --nproc_per_node 1 -m benchmarks.ab_interleaved --device cuda \
    --cases tp_mlp,tp_attention,sp_block --a nvfuser_dtensor:global_view --b nvfuser_dtensor --calls 100 \
    --out "$out/h200_tp1_local_execution" > "$out/tp_ab.log" 2>&1
  echo "== tp a/b"; grep -A7 "^case" "$out/tp_ab.log"
fi
