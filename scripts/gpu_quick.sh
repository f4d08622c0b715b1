#!/usr/bin/env bash
# A short GPU check of what changed last (about 5 minutes), on the device machine after
# `source .device/setup.sh`, everything at once, each model in its own process:
# - training steps of the models the last changes touch, default options: GPT-2 (padded LM
#   head GEMMs, Note [Padded matmuls]), Llama (rotary backward regions, Note [Mixed input
#   layouts with several outputs]), ConvNeXt (channels_last rule), ViT-S/16 (one definition
#   per repeated layer, Note [Fusion cache key]), ResNet-18 (batch norm in nvFuser);
# - ViT-S/16 and T5 with fuse_matmul=True (Note [One matmul per region]: they took more than
#   420 s to compile before);
# - BERT and RoBERTa, whose embedding regions now use take_along_axis (docs/nvfuser_faults.md item 7);
# - the GPU tests of the translators and layouts changed last.
# The global view's GPU check is scripts/gpu_global_view.sh (a second device call).
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
zoo gather bert,roberta eager,nvfuser_dtensor &
timeout "$t" python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_layouts.py tests/test_pad_matmul.py \
  tests/test_cuda_graphs.py > "$out/tests.log" 2>&1 &
wait
for z in default fuse_matmul gather; do echo "== $z"; grep -E "^\[" "$out/$z.log"; grep -E "^\| " "$out/$z/summary.md" 2>/dev/null | cut -c1-260; done
echo "== tests"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -12

