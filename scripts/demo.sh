#!/usr/bin/env bash
# The main job: a Hugging Face model (Llama, from its config class) through torch.compile(backend="nvfuser_dtensor").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/venv.sh
exec .venv/bin/python examples/demo.py "$@"
