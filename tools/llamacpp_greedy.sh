#!/usr/bin/env bash
# llama.cpp's own greedy tokens for a GGUF file, from token ids
# (tools/llamacpp/greedy.cc against the libllama of tools/llamacpp_build.sh,
# compiled on first use). Prints {"tokens": [...], "gaps": [...]}.
#
#   tools/llamacpp_greedy.sh MODEL.gguf PROMPT_IDS N [THREADS [LOGITS.f32]]
#   tools/llamacpp_greedy.sh --build      (build only; prints the driver's path)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$("$here/llamacpp_build.sh" llama)
src=$build/../llama_cpp_python-*/vendor/llama.cpp
src=$(echo $src)
driver=$build/bin/claw-llamacpp-greedy
if [[ ! -x $driver || $here/llamacpp/greedy.cc -nt $driver ]]; then
  exec 9>"$build/.greedy.lock"
  flock 9
  if [[ ! -x $driver || $here/llamacpp/greedy.cc -nt $driver ]]; then
    c++ -std=c++17 -O2 -I"$src/include" -I"$src/ggml/include" "$here/llamacpp/greedy.cc" -o "$driver.tmp" \
      -L"$build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$build/bin"
    mv "$driver.tmp" "$driver"
  fi
fi
if [[ ${1:-} == --build ]]; then
  echo "$driver"
  exit 0
fi
exec "$driver" "$@"
