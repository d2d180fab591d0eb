#!/usr/bin/env bash
# Token ids of `claw tokenize` must equal OpenAI's tiktoken (npm
# tiktoken@1.0.22) on a 5.2 MB slice of the oracle corpus (make_corpus.cjs:
# English prose, code, multilingual text with CJK and emoji, whitespace runs,
# fuzz lines, special tokens as text and recognised), and decoding must give
# back the input byte for byte.
#
#   oracle_test.sh CLAW_BINARY ENCODING
#
# ENCODING: gpt2 (claw's GPT2BPETokenizer from encoder.json + vocab.bpe) or
# r50k_base, cl100k_base, o200k_base (TikTokenizer from the rank file).
# Needs $CLAW_DATA_DIR with scripts/fetch-data's files and scripts/setup's
# npm packages; fails (never skips) when they are missing.
. "$(dirname "$0")/../../lib.sh"
claw=$1
encoding=$2
repo=$(cd "$here/../../.." && pwd)
data=${CLAW_DATA_DIR:?CLAW_DATA_DIR must name the data directory}
modules=$data/npm/node_modules

if ! command -v node >/dev/null; then
  echo "FAIL: node is not installed; run scripts/setup (it installs nodejs and the tiktoken oracle)"
  exit 1
fi
if [[ ! -f $modules/tiktoken/package.json ]]; then
  echo "FAIL: the tiktoken oracle is not in $modules; run scripts/setup"
  exit 1
fi

case $encoding in
  gpt2) tok=() ;;
  r50k_base | cl100k_base | o200k_base)
    tok=(--tokenizer-type TikTokenizer --tokenizer-model "$data/tiktoken/$encoding.tiktoken") ;;
  *) echo "FAIL: unknown encoding $encoding"; exit 2 ;;
esac

node "$here/make_corpus.cjs" "$tmp" "$data" "$repo" || { echo "FAIL: could not build the corpus"; exit 1; }
# The 5 MB slice the other tokenizer oracles use (hf_vs_tokenizers.py): the
# generated files whole, the first 1.1 MB of prose and of code (cut at a line).
for f in prose code; do
  head -c 1100000 "$tmp/$f.txt" | sed '$d' >"$tmp/$f.cut" && mv "$tmp/$f.cut" "$tmp/$f.txt"
done
ls -l "$tmp" | awk 'NR > 1 { printf "corpus: %s %d bytes\n", $9, $5 }'

status=0
fail() { echo "FAIL: $*"; status=1; }

cases=()
# Whole files: newlines and whitespace runs are part of the text.
for f in prose code multilingual special; do
  "$claw" tokenize "${tok[@]}" --whole-input --input "$tmp/$f.txt" >"$tmp/$f.ids" || fail "claw tokenize $f.txt"
  cases+=("whole:text:$tmp/$f.txt:$tmp/$f.ids")
done
"$claw" tokenize "${tok[@]}" --whole-input --special --input "$tmp/special.txt" >"$tmp/special.all.ids" ||
  fail "claw tokenize --special special.txt"
cases+=("whole:all:$tmp/special.txt:$tmp/special.all.ids")
# Line mode on two threads: many short texts, batch encoding.
for f in fuzz multilingual; do
  "$claw" tokenize "${tok[@]}" --num-threads 2 --input "$tmp/$f.txt" >"$tmp/$f.lines.ids" || fail "claw tokenize $f.txt"
  cases+=("lines:text:$tmp/$f.txt:$tmp/$f.lines.ids")
done
node "$here/tiktoken_oracle.cjs" "$modules" "$encoding" "${cases[@]}" || status=1

# decode(encode(x)) == x, byte for byte.
for f in prose code multilingual special special.all; do
  text=$tmp/${f%.all}.txt
  "$claw" tokenize "${tok[@]}" --decode --whole-input --input "$tmp/$f.ids" | cmp -s - "$text" &&
    echo "ok round trip $f" || fail "decode(encode($f)) differs from the input"
done
"$claw" tokenize "${tok[@]}" --decode --input "$tmp/fuzz.lines.ids" | cmp -s - "$tmp/fuzz.txt" &&
  echo "ok round trip fuzz lines" || fail "line-mode decode(encode(fuzz.txt)) differs from the input"
exit $status
