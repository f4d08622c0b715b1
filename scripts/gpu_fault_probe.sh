#!/usr/bin/env bash
# On the GPU machine, after `source .device/setup.sh`: one training step of each model
# through the backend, each model in its own process (a fault poisons its CUDA context).
# A model that faults is run again with CUDA_LAUNCH_BLOCKING=1, NVFUSER_DTENSOR_TRACE=1 and
# its FusionDefinitions dumped, so the log names the region; compute-sanitizer runs on
# PROBE_SANITIZE models where the machine allows it. Logs under $OUT/probe.
#   PROBE_MODELS="t5 llama" PROBE_OPTIONS='{"fuse_matmul": true}' bash scripts/gpu_fault_probe.sh
set -uo pipefail
out="${OUT:-/tmp/gpu-probe}/probe"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation . > "$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
python3 -c "import torch, transformers, timm, torchvision, nvfuser_direct as n; print('torch', torch.__version__, 'transformers', transformers.__version__, 'timm', timm.__version__, 'torchvision', torchvision.__version__, 'nvfuser', n.__version__)" | tee "$out/env.txt"
models="${PROBE_MODELS:-prenorm_block t5 llama qwen2 bert gpt2}"
options="${PROBE_OPTIONS:-{\}}"
for m in $models; do
  timeout "${PROBE_TIMEOUT:-240}" python3 scripts/gpu_fault_probe.py "$m" --options "$options" > "$out/$m.log" 2>&1 &
done
wait
for m in $models; do
  echo "== $m: $(grep -E "loss_err|Error|error:" "$out/$m.log" | tail -2 | tr '\n' ' ')"
  if grep -q -E "CUDA error|illegal memory|misaligned|CUBLAS|cudaError" "$out/$m.log"; then
    CUDA_LAUNCH_BLOCKING=1 NVFUSER_DTENSOR_TRACE=1 timeout 240 python3 scripts/gpu_fault_probe.py "$m" --steps 1 \
      --options "$(python3 -c "import json,sys; o=json.loads(sys.argv[1]); o['dump_dir']='$out/dump-$m'; print(json.dumps(o))" "$options")" \
      > "$out/$m.blocking.log" 2>&1
    echo "   blocking re-run: $(grep -B3 -E "CUDA error|illegal|misaligned" "$out/$m.blocking.log" | grep "trace\]" | tail -1)"
  fi
done
if command -v compute-sanitizer > /dev/null; then
  for m in ${PROBE_SANITIZE:-}; do
    timeout 300 compute-sanitizer --tool memcheck --print-limit 20 python3 scripts/gpu_fault_probe.py "$m" --steps 1 \
      > "$out/$m.sanitizer.log" 2>&1
    echo "== sanitizer $m: $(grep -m3 -E "Invalid|ERROR SUMMARY|misaligned|not supported" "$out/$m.sanitizer.log" | tr '\n' ' ')"
  done
fi
tar -czf "${OUT:-/tmp/gpu-probe}/probe-logs.tgz" -C "$out/.." probe 2>/dev/null
