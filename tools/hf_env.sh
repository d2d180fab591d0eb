#!/usr/bin/env bash
# A Python environment with Hugging Face `transformers` for
# bench/drivers/hf_transformers_check.py, on CPU, without downloading a torch.
#
#   PY=$(tools/hf_env.sh [VENV])    # default VENV: build/hf-venv
#   "$PY" bench/drivers/hf_transformers_check.py --claw build/bin/claw
#
# The venv sees Debian's system packages (--system-site-packages): torch 1.13
# (python3-torch) and numpy 1.24 come from there, and pip adds only the pure
# Hugging Face side (~35 MB of wheels, ~10 s), and the `gguf` reader
# (llama.cpp's Python package: transformers' GGUF loading uses it). transformers 4.49.0 is the newest
# release that works with torch 1.13: 4.50's modeling_utils imports
# torch.distributed.tensor (torch 2.x's DTensor), so no model loads. numpy<2
# keeps pip from replacing the numpy Debian's torch was built against. PEFT
# (tests/e2e/parity/peft_interchange.sh) goes in with --no-deps: its declared
# torch>=1.13 would otherwise let pip pull a CUDA torch over Debian's; peft
# 0.13.2 and accelerate 1.0.1 run on torch 1.13; jinja2 is what PEFT's
# save_pretrained writes its model card with.
# Idempotent: an existing venv that already imports the pinned transformers is
# reused as is. Progress goes to stderr; stdout is only the python path.
set -euo pipefail

VENV=${1:-build/hf-venv}
BASE_PY=${HF_ENV_BASE_PYTHON:-/usr/bin/python3}
TRANSFORMERS=4.49.0
PKGS=("transformers==$TRANSFORMERS" "tokenizers>=0.21,<0.22" "safetensors>=0.4.3" "huggingface_hub>=0.26,<1.0" "numpy<2"
      "gguf>=0.10,<0.18" "jinja2")

PEFT_PKGS=("peft==0.13.2" "accelerate==1.0.1")

if ! "$VENV/bin/python" -c "import torch, safetensors, gguf, peft, jinja2, transformers as t; assert t.__version__ == '$TRANSFORMERS'" \
    2>/dev/null; then
  "$BASE_PY" -c 'import torch, numpy' ||
    { echo "hf_env.sh: $BASE_PY lacks torch/numpy (apt-get install python3-torch python3-numpy python3-venv)" >&2; exit 1; }
  echo "hf_env.sh: creating $VENV with transformers==$TRANSFORMERS" >&2
  "$BASE_PY" -m venv --system-site-packages "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PKGS[@]}" psutil pyyaml >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${PEFT_PKGS[@]}" >&2
  "$VENV/bin/python" -c "import transformers, safetensors.torch, peft; from transformers import GPT2LMHeadModel, LlamaForCausalLM" >&2
fi
echo "$(cd "$VENV" && pwd)/bin/python"
