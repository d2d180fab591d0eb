#!/usr/bin/env bash
# tokenizer.json files (claw) against the tokenizers library on a 5 MB slice
# of the oracle corpus: hf_vs_tokenizers.py says how. The files are built
# from llama.cpp's vocabularies by hf_json_from_gguf.py (kept for reruns).
#
#   hf_vs_tokenizers.sh HF_TOKENIZER_DRIVER FAMILY...
. "$(dirname "$0")/../../lib.sh"
driver=$1
shift
repo=$(cd "$here/../../.." && pwd)
node "$here/make_corpus.cjs" "$tmp" "${CLAW_DATA_DIR:?CLAW_DATA_DIR must name the data directory}" "$repo" ||
  fail "could not build the corpus"
py=$("$repo/tests/oracle_env.sh" hf)
export RAYON_NUM_THREADS=1  # the library on one thread, as claw's driver: the test holds one CPU
llama_cpp=$("$repo/tools/llamacpp_sdist.sh")
"$py" "$here/hf_vs_tokenizers.py" --driver "$driver" --models "$llama_cpp/models" --corpus "$tmp" --work "$tmp" "$@"
