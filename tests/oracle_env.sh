#!/usr/bin/env bash
# The outside references of the oracle tests that come from PyPI or npm, each
# in an environment under /tmp made on first use and reused while it holds
# its pinned packages. Prints the environment's python (npm: its directory).
#
#   tests/oracle_env.sh hf|torch2|curate|tensorboard|openai|openai-npm
#
#   hf           transformers 4.49, PEFT and gguf beside Debian's torch (tools/hf_env.sh)
#   torch2       PyPI torch 2.5 for the float8 casts, transformers 4.57 (tools/torch2_env.sh)
#   curate       datatrove, fastText, spaCy, datasketch (tests/e2e/curate/curate_env.sh)
#   tensorboard  TensorBoard's EventAccumulator
#   openai       the official openai Python SDK
#   openai-npm   the official openai npm package (Node.js)
#
# ctest builds each once per suite in a fixture of its own (venv_<name>,
# tests/CMakeLists.txt) that every test using it requires, so the tests only
# read an environment that is already there and can run side by side.
# Progress goes to stderr; stdout is only the path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case ${1:-} in
  hf) exec "$here/../tools/hf_env.sh" /tmp/claw-hf-venv ;;
  torch2) exec "$here/../tools/torch2_env.sh" /tmp/claw-torch2-venv ;;
  curate) exec "$here/e2e/curate/curate_env.sh" ;;
  tensorboard)
    venv=/tmp/claw-venv-tensorboard
    if ! "$venv/bin/python" -c 'import tensorboard' 2>/dev/null; then
      /usr/bin/python3 -m venv "$venv" >&2
      "$venv/bin/pip" install -q --disable-pip-version-check tensorboard >&2
    fi
    echo "$venv/bin/python" ;;
  openai)
    venv=/tmp/claw-venv-openai
    if ! "$venv/bin/python" -c 'import openai' 2>/dev/null; then
      /usr/bin/python3 -m venv "$venv" >&2
      "$venv/bin/pip" install -q --disable-pip-version-check "openai>=1.40,<2" >&2
    fi
    echo "$venv/bin/python" ;;
  openai-npm)
    npm_dir=/tmp/claw-npm-openai
    if ! [[ -f $npm_dir/node_modules/openai/package.json ]]; then
      mkdir -p "$npm_dir"
      [[ -f $npm_dir/package.json ]] || echo '{"name": "claw-openai-client-test", "private": true}' >"$npm_dir/package.json"
      (cd "$npm_dir" && npm install --silent --no-audit --no-fund "openai@4") >&2
    fi
    echo "$npm_dir" ;;
  *) echo "oracle_env.sh: unknown environment '${1:-}' (valid: hf, torch2, curate, tensorboard, openai, openai-npm)" >&2
     exit 2 ;;
esac
