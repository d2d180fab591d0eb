#!/usr/bin/env bash
# GGUF files made by llama.cpp's tools at every type claw reads, read and run
# by claw against gguf-py and llama.cpp itself (gguf_quants.py says what is
# checked).
#
#   gguf_quants.sh CLAW_BINARY QUANT_DRIVER llama|gpt2|qwen2|gemma3
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
driver=$2
family=$3
# GPT-2's files are also scored by llama-perplexity (the perplexity check):
# no BOS at the windows' starts, as claw perplexity scores them.
text=
[[ $family != gpt2 ]] || text=${CLAW_DATA_DIR:?}/sotu/2021_joseph_r_biden_d.txt
repo=$(cd "$here/../../.." && pwd)
py=$("$repo/tests/oracle_env.sh" torch2)
build=$("$repo/tools/llamacpp_build.sh" llama llama-quantize llama-perplexity)
greedy=$("$repo/tools/llamacpp_greedy.sh" --build)
src=$(echo "$build"/../llama_cpp_python-*/vendor/llama.cpp)
"$py" "$here/gguf_quants.py" make "$family" "$tmp" --llamacpp "$src"
"$py" "$here/gguf_quants.py" check "$family" "$tmp" --claw "$claw" --driver "$driver" --greedy "$greedy" \
  --llamacpp "$src" --bin "$build/bin" ${text:+--text "$text"}
