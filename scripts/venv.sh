#!/usr/bin/env bash
# Create (first use) and reuse .venv with Python 3.12, with the project installed editable
# with extras cu128,test,bench. Re-installs only when setup.cfg/setup.py change.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=.venv
STAMP="$VENV/.nvfuser_dtensor_install_stamp"
EXTRAS='.[cu128,test,bench]'
# nvfuser-cu128-torch210 is built against torch 2.10 and fails to load with 2.11
# (undefined c10 symbols), while setup.cfg allows torch<2.12: pin the matching torch.
TORCH_PIN='torch>=2.10,<2.11'

is_py312() {
    "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1
}

find_python() {
    local p
    # A pyenv shim can be on PATH without a 3.12 selected, so try each candidate.
    for p in $(command -v python3.12 2>/dev/null) "$HOME"/.pyenv/versions/3.12*/bin/python; do
        if [ -x "$p" ] && is_py312 "$p"; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# Two concurrent runs would install into one venv at once and leave broken files (torch then
# dies with a bus error on import): the second waits for the first.
if command -v flock > /dev/null; then
    exec 9> ".venv.lock"
    flock 9
fi

if [ ! -x "$VENV/bin/python" ]; then
    if ! PY=$(find_python); then
        echo "scripts/venv.sh: Python 3.12 not found (looked for python3.12 on PATH and ~/.pyenv/versions/3.12*/bin/python)." >&2
        echo "nvFuser wheels exist for Python 3.10/3.12 only; install Python 3.12 and retry." >&2
        exit 1
    fi
    echo "scripts/venv.sh: creating $VENV with $PY"
    "$PY" -m venv "$VENV"
    rm -f "$STAMP"
fi

if ! is_py312 "$VENV/bin/python"; then
    echo "scripts/venv.sh: $VENV is not a Python 3.12 environment; remove it ($VENV) and rerun." >&2
    exit 1
fi

want=$( (cat setup.cfg setup.py; echo "$EXTRAS $TORCH_PIN") | sha256sum | cut -d' ' -f1)
have=$(cat "$STAMP" 2>/dev/null || true)
if [ "$want" != "$have" ]; then
    echo "scripts/venv.sh: installing $EXTRAS ($TORCH_PIN) into $VENV"
    log="$VENV/pip-install.log"
    : >"$log"
    # torch's CUDA build and its nvidia-* wheels take about 7.5 GB installed and 3.5 GB as
    # wheels; pip's cache keeps a second copy of those wheels while it installs. Reuse the
    # cache where the disk has room for it, and go without it where it does not (a CI
    # machine once failed here with "No space left on device").
    free_kb=$(df -Pk "$VENV" | awk 'NR == 2 {print $4}')
    pip_args=(--disable-pip-version-check)
    if [ "${free_kb:-0}" -lt $((24 * 1024 * 1024)) ]; then
        echo "scripts/venv.sh: $((free_kb / 1024 / 1024)) GiB free on disk: installing without pip's cache"
        pip_args+=(--no-cache-dir)
    fi
    # Two steps, so that torch's wheels are unpacked and deleted before the rest download.
    if ! "$VENV/bin/python" -m pip install "${pip_args[@]}" "$TORCH_PIN" >>"$log" 2>&1 ||
        ! "$VENV/bin/python" -m pip install "${pip_args[@]}" -e "$EXTRAS" "$TORCH_PIN" >>"$log" 2>&1; then
        tail -n 40 "$log" >&2
        df -h "$VENV" >&2 || true
        echo "scripts/venv.sh: pip install failed (full log: $log)" >&2
        exit 1
    fi
    echo "$want" >"$STAMP"
fi
