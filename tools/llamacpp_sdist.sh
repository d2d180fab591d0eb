#!/usr/bin/env bash
# llama.cpp's source tree as the PyPI sdist of llama-cpp-python ships it
# (pinned), downloaded once and unpacked: the real chat templates
# (vendor/llama.cpp/models/templates/*.jinja) and vocabularies
# (models/ggml-vocab-*.gguf with their .inp/.out cases) that the tokenizer
# and template oracles compare with. Prints the llama.cpp directory.
#
#   tools/llamacpp_sdist.sh [CACHE_DIR]     (default /tmp/claw-llamacpp)
set -euo pipefail
version=0.3.36
cache=${1:-/tmp/claw-llamacpp}
dir=$cache/llama_cpp_python-$version/vendor/llama.cpp
if [[ ! -d $dir/models/templates ]]; then
  mkdir -p "$cache"
  tarball=$cache/llama_cpp_python-$version.tar.gz
  if [[ ! -s $tarball ]]; then
    url=$(curl -fsSL "https://pypi.org/pypi/llama-cpp-python/$version/json" |
          /usr/bin/python3 -c 'import json, sys; print([u["url"] for u in json.load(sys.stdin)["urls"] if u["packagetype"] == "sdist"][0])')
    case $url in http*) ;; *) url="https://pypi.org/${url#../../}" ;; esac
    echo "llamacpp_sdist: downloading $url" >&2
    curl -fsSL --retry 3 -o "$tarball.tmp" "$url"
    mv "$tarball.tmp" "$tarball"
  fi
  tar xzf "$tarball" -C "$cache" "llama_cpp_python-$version/vendor/llama.cpp/models" >&2
fi
echo "$dir"
