# Sourced by the scripts/gpu_*.sh checks on the device machine, after `source .device/setup.sh`:
#   source scripts/gpu_prelude.sh LOGDIR
# installs the project offline, applies nvFuser's multidevice ABI fix (NVFUSER_ABI_FIXED=1 when
# it worked), logs both in LOGDIR, and stops the calling script if the install fails. Once
# per shell: a command that sources it first and then starts two scripts side by side
# (GPU_PRELUDE_DONE=1 exported) does not install twice at once.
set -uo pipefail
mkdir -p "$1"
export PYTHONUNBUFFERED=1
if [ "${GPU_PRELUDE_DONE:-}" != 1 ]; then
  python3 -m pip install -q --no-deps --no-build-isolation . > "$1/install.log" 2>&1 || { tail -20 "$1/install.log"; exit 1; }
  python3 scripts/gpu_nvfuser_abi_fix.py > "$1/abi_fix.log" 2>&1 && export NVFUSER_ABI_FIXED=1
  export GPU_PRELUDE_DONE=1
fi
