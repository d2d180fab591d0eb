#!/usr/bin/env bash
# A Python environment with PyTorch 2.x from PyPI, for the references that
# Debian's torch 1.13 lacks: the float8 dtypes of tests/e2e/parity/fp_formats.py,
# and transformers 4.57 (with PEFT 0.17) for the model families that 4.49
# (the newest on torch 1.13, tools/hf_env.sh) does not have (Qwen 3, Gemma:
# tests/e2e/parity/hf_family.sh, peft_interchange.sh), and llama.cpp's own
# convert_hf_to_gguf.py (its LazyTorchTensor names the float8 dtypes; it
# imports sentencepiece for Llama's and Gemma's vocabularies:
# tests/e2e/serve/gguf_quants.py).
#
#   PY=$(tools/torch2_env.sh [VENV])    # default VENV: /tmp/claw-torch2-venv
#
# PyPI's Linux torch wheel is the CUDA build; it imports (and runs on the CPU)
# only with its NVIDIA runtime wheels present, so pip installs them too
# (~2.5 GB once; the venv is reused while it imports the pinned versions).
# Progress goes to stderr; stdout is only the python path.
set -euo pipefail

VENV=${1:-/tmp/claw-torch2-venv}
TORCH=2.5.1
TRANSFORMERS=4.57.6
PEFT=0.17.1
SENTENCEPIECE=0.2.0
BASE_PY=${TORCH2_ENV_BASE_PYTHON:-/usr/bin/python3}

if ! "$VENV/bin/python" -c "import torch, numpy; assert torch.__version__.split('+')[0] == '$TORCH'" 2>/dev/null; then
  echo "torch2_env.sh: creating $VENV with torch==$TORCH (PyPI, ~2.5 GB)" >&2
  "$BASE_PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "torch==$TORCH" "numpy<2" >&2
  "$VENV/bin/python" -c "import torch; assert hasattr(torch, 'float8_e4m3fn')" >&2
fi
if ! "$VENV/bin/python" -c "import safetensors, peft, transformers as t; assert t.__version__ == '$TRANSFORMERS'
assert peft.__version__ == '$PEFT'" 2>/dev/null; then
  echo "torch2_env.sh: adding transformers==$TRANSFORMERS and peft==$PEFT to $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "transformers==$TRANSFORMERS" \
    "peft==$PEFT" "huggingface_hub<1.0" "safetensors>=0.4.3" "numpy<2" "torch==$TORCH" >&2
  "$VENV/bin/python" -c "from transformers import Qwen3ForCausalLM; import peft" >&2
fi
if ! "$VENV/bin/python" -c "import sentencepiece as s; assert s.__version__ == '$SENTENCEPIECE'" 2>/dev/null; then
  echo "torch2_env.sh: adding sentencepiece==$SENTENCEPIECE to $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "sentencepiece==$SENTENCEPIECE" >&2
fi
echo "$VENV/bin/python"
