#!/usr/bin/env bash
# parity_fp_formats: claw's casts against PyTorch 2.x (a PyPI torch in a venv,
# tools/torch2_env.sh) and the OCP MX / NVFP4 reference (fp_formats.py).
#   tests/e2e/parity/fp_formats.sh build/bin/formats_dump
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PY=$("$here/../../oracle_env.sh" torch2)
exec "$PY" "$here/fp_formats.py" --dump-tool "$1"
