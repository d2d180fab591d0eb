#!/usr/bin/env bash
# SentencePiece through claw must give the ids of Debian's spm_encode and the
# text of spm_decode, for models trained by `claw train-tokenizer` (BPE and
# unigram) and by spm_train itself, on English prose, code, multilingual
# text and fuzz lines (make_corpus.cjs).
#
#   sentencepiece_test.sh CLAW_BINARY
#
# Needs the `sentencepiece` package and node (scripts/setup); fails, never
# skips, when they are missing.
. "$(dirname "$0")/../../lib.sh"
claw=$1
repo=$(cd "$here/../../.." && pwd)
data=${CLAW_DATA_DIR:?CLAW_DATA_DIR must name the data directory}

for tool in spm_train spm_encode spm_decode node; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed; run scripts/setup"; exit 1; }
done

node "$here/make_corpus.cjs" "$tmp" "$data" "$repo" || { echo "FAIL: could not build the corpus"; exit 1; }
# Training text: some speeches (one per line; claw cuts them into
# sentences), code and multilingual lines. Test text: all of it, line by line.
head -c 600000 "$tmp/prose.txt" >"$tmp/train.txt"
head -c 300000 "$tmp/code.txt" >>"$tmp/train.txt"
head -c 300000 "$tmp/multilingual.txt" >>"$tmp/train.txt"
head -c 3000000 "$tmp/prose.txt" >"$tmp/test.txt"
cat "$tmp/multilingual.txt" "$tmp/fuzz.txt" >>"$tmp/test.txt"
head -c 1000000 "$tmp/code.txt" >>"$tmp/test.txt"

status=0
fail() { echo "FAIL: $*"; status=1; }

check_model() {  # check_model NAME MODEL
  local name=$1 model=$2
  local tok=(--tokenizer-type SentencePieceTokenizer --tokenizer-model "$model")
  spm_encode --model "$model" --output_format id <"$tmp/test.txt" >"$tmp/$name.spm.ids" || { fail "spm_encode $name"; return; }
  "$claw" tokenize "${tok[@]}" --num-threads 2 --input "$tmp/test.txt" >"$tmp/$name.claw.ids" || { fail "claw tokenize $name"; return; }
  if cmp -s "$tmp/$name.spm.ids" "$tmp/$name.claw.ids"; then
    echo "ok $name: $(wc -l <"$tmp/$name.spm.ids") lines, $(wc -w <"$tmp/$name.spm.ids") ids identical to spm_encode"
  else
    fail "$name: claw's ids differ from spm_encode's; first difference:"
    diff <(cut -c1-300 "$tmp/$name.spm.ids") <(cut -c1-300 "$tmp/$name.claw.ids") | head -6
  fi
  spm_decode --model "$model" --input_format id <"$tmp/$name.spm.ids" >"$tmp/$name.spm.txt" || { fail "spm_decode $name"; return; }
  "$claw" tokenize "${tok[@]}" --decode --input "$tmp/$name.spm.ids" >"$tmp/$name.claw.txt" || { fail "claw decode $name"; return; }
  cmp -s "$tmp/$name.spm.txt" "$tmp/$name.claw.txt" && echo "ok $name: decoded text identical to spm_decode" ||
    fail "$name: claw --decode differs from spm_decode"
}

for type in bpe unigram; do
  "$claw" train-tokenizer --input "$tmp/train.txt" --model-type $type --vocab-size 4000 --character-coverage 0.98 \
    --num-threads 2 --output-prefix "$tmp/claw_$type" || { fail "claw train-tokenizer --model-type $type"; continue; }
  check_model "claw-$type" "$tmp/claw_$type.model"
done
spm_train --input "$tmp/train.txt" --model_prefix "$tmp/spm_bpe" --model_type bpe --vocab_size 4000 --character_coverage 0.98 \
  --minloglevel 1 --num_threads 2 >/dev/null 2>&1 || fail "spm_train"
check_model spm_train-bpe "$tmp/spm_bpe.model"
exit $status
