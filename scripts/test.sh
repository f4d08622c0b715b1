#!/usr/bin/env bash
# The test command: the CPU test suite (tests/) in .venv; extra arguments go to pytest.
# Tests marked gpu are skipped without CUDA. pytest's exit code is passed on unchanged, so
# "no tests collected" (5) counts as a failure, and pytest's summary line stays the last line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/venv.sh
exec .venv/bin/python -m pytest -q "$@"
