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
    # The simple index (PEP 503), which every PyPI mirror serves: the
    # sdist's link, relative or absolute, with its #sha256= fragment.
    index=https://pypi.org/simple/llama-cpp-python/
    url=$(curl -fsSL "$index" | /usr/bin/python3 -c '
import re, sys, urllib.parse
name = sys.argv[2]
links = [h for h in re.findall(r"href=\"([^\"]+)\"", sys.stdin.read()) if h.split("#")[0].endswith("/" + name)]
if not links:
    sys.exit(f"llamacpp_sdist: {name} is not in {sys.argv[1]}")
print(urllib.parse.urljoin(sys.argv[1], links[0].split("#")[0]))' "$index" "llama_cpp_python-$version.tar.gz")
    echo "llamacpp_sdist: downloading $url" >&2
    curl -fsSL --retry 3 -o "$tarball.tmp" "$url"
    mv "$tarball.tmp" "$tarball"
  fi
  tar xzf "$tarball" -C "$cache" "llama_cpp_python-$version/vendor/llama.cpp/models" >&2
fi
echo "$dir"
