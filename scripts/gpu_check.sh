#!/usr/bin/env bash
# The GPU session in one command (run on the device machine after `source .device/setup.sh`):
#   bash scripts/gpu_check.sh [pytest args...]
# Installs the project offline, runs the test suite on CUDA (real nvFuser) and the first-look
# benchmark, and keeps every log under $OUT (or /tmp/gpu-check).
set -uo pipefail
out="${OUT:-/tmp/gpu-check}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation . > "$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/env.txt"
python3 -c "import torch, nvfuser_direct as n; print('torch', torch.__version__, 'nvfuser', n.__version__)" | tee -a "$out/env.txt"
tests="${GPU_TESTS:-tests}"
timeout "${GPU_TEST_TIMEOUT:-420}" python3 -m pytest -q -p no:cacheprovider -rfE $tests "$@" 2>&1 | tee "$out/pytest.log" | tail -40
echo "pytest exit: ${PIPESTATUS[0]}"
if [ "${GPU_BENCH:-1}" = 1 ]; then
  timeout "${GPU_BENCH_TIMEOUT:-240}" python3 -m benchmarks.first_look --iters 50 ${GPU_BENCH_ARGS:-} 2>&1 | tee "$out/first_look.log" | grep -v Warning
fi
