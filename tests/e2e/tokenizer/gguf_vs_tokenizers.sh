#!/usr/bin/env bash
# GGUF vocabularies (claw) against the tokenizers library (transformers'
# conversion of the same GGUF files) on the oracle corpus of make_corpus.cjs:
# gguf_vs_tokenizers.py says how.
#
#   gguf_vs_tokenizers.sh GGUF_VOCAB_DRIVER VOCAB...
. "$(dirname "$0")/../../lib.sh"
driver=$1
shift
repo=$(cd "$here/../../.." && pwd)
node "$here/make_corpus.cjs" "$tmp" "${CLAW_DATA_DIR:?CLAW_DATA_DIR must name the data directory}" "$repo" ||
  fail "could not build the corpus"
py=$("$repo/tests/oracle_env.sh" hf)
export RAYON_NUM_THREADS=1  # the library on one thread: the test holds one CPU
models=$("$repo/tools/llamacpp_sdist.sh")/models
"$py" "$here/gguf_vs_tokenizers.py" --driver "$driver" --models "$models" --corpus "$tmp" "$@"
