#!/usr/bin/env bash
# llama.cpp built from the source tree that the PyPI sdist of
# llama-cpp-python carries (tools/llamacpp_sdist.sh; pinned), for the tests
# and benches that use llama.cpp as the reference runtime: libllama and the
# named tools (default: the library alone). CPU only, native ISA, Release,
# through ccache when there is one; built once per cache directory and
# target set. Prints the build directory (libraries and tools in bin/).
#
#   tools/llamacpp_build.sh [TARGET...]     e.g. llama llama-server llama-quantize
#
# CLAW_LLAMACPP_CACHE overrides the cache directory (default /tmp/claw-llamacpp).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${CLAW_LLAMACPP_CACHE:-/tmp/claw-llamacpp}
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(llama)
src=$("$here/llamacpp_sdist.sh" "$cache")  # .../vendor/llama.cpp (models/ unpacked)
tarball=$(ls "$cache"/llama_cpp_python-*.tar.gz | head -1)
if [[ ! -f $src/CMakeLists.txt ]]; then
  top=$(basename "$tarball" .tar.gz)
  tar xzf "$tarball" -C "$cache" "$top/vendor/llama.cpp" >&2
fi
build=$cache/build
exec 9>"$cache/.build.lock"  # tests that build at once wait for each other
flock 9
stamp=$build/.claw-targets
want=$(printf '%s\n' "${targets[@]}" | sort -u)
if [[ ! -f $stamp ]] || ! comm -23 <(echo "$want") <(sort -u "$stamp") | { ! grep -q .; }; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  echo "llamacpp_build: building ${targets[*]} in $build (first time only)" >&2
  cmake -S "$src" -B "$build" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DGGML_NATIVE=ON -DGGML_OPENMP=ON >&2
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >&2
  { [[ -f $stamp ]] && cat "$stamp"; echo "$want"; } | sort -u > "$stamp.tmp"
  mv "$stamp.tmp" "$stamp"
fi
echo "$build"
