#!/usr/bin/env bash
# `claw tokenize` and `claw train-tokenizer` from the command line: the
# defaults work out of the box, the documented formats round-trip, and bad
# input gives exit code 1 and a one-line error naming the flag, file or
# line and what is valid.
#   tokenize_cli.sh CLAW_BINARY CASE
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2
data=${CLAW_DATA_DIR:?CLAW_DATA_DIR must name the data directory}

run() {  # run ARGS... < stdin: sets out (stdout), err (stderr), rc
  out=$("$claw" "$@" 2>"$tmp/stderr")
  rc=$?
  err=$(cat "$tmp/stderr")
}
expect_output() {  # expect_output EXPECTED
  if [[ $rc -ne 0 ]]; then echo "FAIL: exit code $rc: $err"; exit 1; fi
  if [[ $out != "$1" ]]; then echo "FAIL: expected '$1', got '$out'"; exit 1; fi
  echo "ok: $(head -c 200 <<<"$out")"
}
expect_error() {  # expect_error PATTERN: exit 1, stderr is one line "claw: error: ..." matching PATTERN
  # On a CPU that OpenBLAS mis-detects claw restarts itself with the right
  # kernels and says so first (kernels/cpu/blas.cc); that notice is not the error.
  err=$(grep -v '^\[claw\] blas: ' <<<"$err")
  if [[ $rc -ne 1 ]]; then echo "FAIL: exit code $rc (expected 1); stderr: $err"; exit 1; fi
  if [[ $(wc -l <<<"$err") -ne 1 || $err != "claw: error: "* ]]; then echo "FAIL: not a one-line error: $err"; exit 1; fi
  if ! grep -qE -- "$1" <<<"$err"; then echo "FAIL: error does not match /$1/: $err"; exit 1; fi
  echo "ok: $err"
}
tik=(--tokenizer-type TikTokenizer --tokenizer-model "$data/tiktoken/cl100k_base.tiktoken")

case $case_name in
  default_gpt2)  # no flags: GPT-2 from the data directory
    run tokenize <<<"Hello world, this is a test."
    expect_output "15496 995 11 428 318 257 1332 13" ;;
  lines_round_trip)  # one line of ids per line; --decode restores the text
    printf 'first line\n\n  third\tline \r\nemoji \xf0\x9f\x98\x80 <|endoftext|>\n' >"$tmp/in.txt"
    "$claw" tokenize "${tik[@]}" --input "$tmp/in.txt" >"$tmp/ids" || { echo "FAIL: encode"; exit 1; }
    [[ $(wc -l <"$tmp/ids") -eq 4 && -z $(sed -n 2p "$tmp/ids") ]] || { echo "FAIL: not one line per line:"; cat "$tmp/ids"; exit 1; }
    "$claw" tokenize "${tik[@]}" --decode --input "$tmp/ids" | cmp - "$tmp/in.txt" || { echo "FAIL: round trip"; exit 1; }
    echo "ok: 4 lines round-trip" ;;
  whole_input_round_trip)  # --whole-input: newlines are text, no newline added
    printf 'a\n\n  b\r\n' >"$tmp/in.txt"
    run tokenize "${tik[@]}" --whole-input --input "$tmp/in.txt"
    expect_output "64 271 220 293 319"
    printf '%s\n' "$out" | "$claw" tokenize "${tik[@]}" --whole-input --decode | cmp - "$tmp/in.txt" ||
      { echo "FAIL: round trip"; exit 1; } ;;
  special)  # special tokens are text unless --special
    run tokenize "${tik[@]}" --special <<<"a<|endoftext|>b"
    expect_output "64 100257 65"
    run tokenize "${tik[@]}" <<<"a<|endoftext|>b"
    expect_output "64 27 91 8862 728 428 91 29 65" ;;
  chat)  # --chat: the conversation as the template renders it, then the ids of that text
    printf '[{"role": "user", "content": "Hi there"}]' >"$tmp/c.json"
    run tokenize --chat "$tmp/c.json" --chat-template chatml
    [[ $rc -eq 0 ]] || { echo "FAIL: exit $rc: $err"; exit 1; }
    want=$'<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n'
    [[ $out == "$want"$'\n'* ]] || { echo "FAIL: rendered: $out"; exit 1; }
    ids=$(printf '%s' "$want" | "$claw" tokenize --whole-input 2>/dev/null)
    [[ ${out##*$'\n'} == "$ids" ]] || { echo "FAIL: ids ${out##*$'\n'}, the rendered text's: $ids"; exit 1; }
    printf '{"messages": "x"}' >"$tmp/bad.json"
    run tokenize --chat "$tmp/bad.json"
    expect_error "--chat .*bad.json: expected a non-empty array" ;;
  unknown_type)
    run tokenize --tokenizer-type BertWordPieceTokenizer <<<"x"
    expect_error "--tokenizer-type 'BertWordPieceTokenizer' is not one of: GPT2BPETokenizer, TikTokenizer, SentencePieceTokenizer" ;;
  missing_rank_file)
    run tokenize --tokenizer-type TikTokenizer --tokenizer-model /nonexistent/cl100k_base.tiktoken <<<"x"
    expect_error "tiktoken rank file /nonexistent/cl100k_base.tiktoken not found; run scripts/fetch-data" ;;
  corrupt_rank_file)
    { head -n 300 "$data/tiktoken/cl100k_base.tiktoken"; echo "not*base64 300"; } >"$tmp/mine.tiktoken"
    run tokenize --tokenizer-type TikTokenizer --tokenizer-model "$tmp/mine.tiktoken" --tiktoken-pattern cl100k <<<"x"
    expect_error "mine.tiktoken line 301: \"not\*base64\" is not canonical base64" ;;
  unknown_rank_file_name)
    cp "$data/tiktoken/r50k_base.tiktoken" "$tmp/mine.tiktoken"
    run tokenize --tokenizer-type TikTokenizer --tokenizer-model "$tmp/mine.tiktoken" <<<"x"
    expect_error "'mine' is not a known encoding .*pass --tiktoken-pattern gpt2, cl100k or o200k" ;;
  bad_pattern)
    run tokenize "${tik[@]}" --tiktoken-pattern cl200k <<<"x"
    expect_error "--tiktoken-pattern 'cl200k' is not one of: gpt2, cl100k, o200k" ;;
  missing_gpt2_merges)
    run tokenize --vocab-file "$data/gpt2/encoder.json" <<<"x"
    expect_error "GPT2BPETokenizer needs --vocab-file \(encoder.json\) and --merge-file \(vocab.bpe\)" ;;
  missing_sentencepiece_model)
    run tokenize --tokenizer-type SentencePieceTokenizer --tokenizer-model "$tmp/none.model" <<<"x"
    expect_error "SentencePiece model .*none.model not found" ;;
  corrupt_sentencepiece_model)
    head -c 1000 "$data/gpt2/vocab.bpe" >"$tmp/bad.model"
    run tokenize --tokenizer-type SentencePieceTokenizer --tokenizer-model "$tmp/bad.model" <<<"x"
    expect_error "SentencePiece model .*bad.model: cannot load it .*expected a .model file" ;;
  hf_malformed_json)
    printf '{"model": {"type": "BPE", "vocab": {' >"$tmp/tokenizer.json"
    run tokenize --tokenizer-type HFTokenizer --tokenizer-model "$tmp" <<<"x"
    expect_error ".*tokenizer.json: not valid JSON \(byte [0-9]+\)" ;;
  hf_unknown_pre_tokenizer)
    printf '{"pre_tokenizer": {"type": "BertPreTokenizer"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}' \
      >"$tmp/tokenizer.json"
    run tokenize --tokenizer-type HFTokenizer --tokenizer-model "$tmp/tokenizer.json" <<<"x"
    expect_error ".*tokenizer.json: pre_tokenizer.type: pre-tokenizer \"BertPreTokenizer\" is not supported \(supported: .*\)" ;;
  hf_missing_file)
    run tokenize --tokenizer-type HFTokenizer --tokenizer-model "$tmp" <<<"x"
    expect_error ".*: no tokenizer.json in this directory" ;;
  hf_template_raises)
    printf '{"pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}, "added_tokens": [{"id": 256, "content": "</s>", "special": true}], "model": {"type": "BPE", "vocab": {%s}, "merges": []}}' \
      "$(/usr/bin/python3 -c 'import json; bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100)); cs = bs[:] + [256 + n for n, b in enumerate(b for b in range(256) if b not in bs)]; bs += [b for b in range(256) if b not in bs]; print(", ".join(json.dumps(chr(c)) + ": " + str(b) for b, c in zip(bs, cs)))')" \
      >"$tmp/tokenizer.json"
    printf '{"eos_token": "</s>", "chat_template": "{%% for m in messages %%}{{ m.content }}\\n{%% endfor %%}{{ raise_exception(\\"no system role here\\") }}"}' \
      >"$tmp/tokenizer_config.json"
    printf '[{"role": "user", "content": "hi"}]' >"$tmp/chat.json"
    run tokenize --tokenizer-type HFTokenizer --tokenizer-model "$tmp" --chat "$tmp/chat.json"
    expect_error ".*/tokenizer_config.json line 2: the template raised: no system role here" ;;
  invalid_utf8)
    run tokenize < <(printf 'fine\nalso fine\nbad \xff byte\n')
    expect_error "stdin line 3: invalid UTF-8 at byte 5 of the line \(0xff\)" ;;
  missing_input)
    run tokenize --input "$tmp/none.txt"
    expect_error "--input .*none.txt: cannot open \(No such file or directory\)" ;;
  bad_id)
    run tokenize --decode < <(printf '15496 995\n15496 x 995\n')
    expect_error "stdin line 2: 'x' is not a token id" ;;
  id_out_of_range)
    run tokenize --decode <<<"15496 50257"
    expect_error "stdin line 1: token id 50257 is outside the gpt2-bpe vocabulary \[0, 50257\)" ;;
  bad_threads)
    run tokenize --num-threads 0 <<<"x"
    expect_error "--num-threads 0 must be at least 1" ;;
  line_too_long)  # a line is bounded: /dev/zero (no newline ever) ends with an error instead of growing
    run tokenize </dev/zero
    expect_error "stdin line 1: longer than --max-line-bytes 67108864 \(64.00 MiB\); raise --max-line-bytes"
    run tokenize --whole-input --input /dev/zero
    expect_error "--input /dev/zero \(--whole-input\): longer than --max-line-bytes 67108864"
    run tokenize --decode </dev/zero
    expect_error "stdin line 1: longer than --max-line-bytes"
    run tokenize --max-line-bytes 10 < <(printf 'short\n0123456789abcdef\nshort\n')
    expect_error "stdin line 2: longer than --max-line-bytes 10 " ;;
  out_of_memory)  # a 300 MB line under a 1 GB address-space limit: a one-line error, not an abort
    err=$( (ulimit -v 1000000; yes 'hello world ' | tr -d '\n' | head -c 300000000 |
            OMP_NUM_THREADS=1 "$claw" tokenize --num-threads 1 --max-line-bytes 400000000 >/dev/null) 2>&1)
    rc=$?
    expect_error "out of memory in \`claw tokenize\`: an allocation failed; .* available now \(" ;;
  train_empty_input)  # SentencePiece's own check has no message: claw names the file
    : >"$tmp/empty.txt"
    run train-tokenizer --input "$tmp/empty.txt" --output-prefix "$tmp/m"
    expect_error "--input .*empty.txt: no text to train on \(empty, or only blank lines\)" ;;
  train_line_too_long)  # the training input's lines are bounded too
    run train-tokenizer --input /dev/zero --output-prefix "$tmp/m"
    expect_error "--input /dev/zero line 1: longer than 67108864 bytes" ;;
  train_missing_output_dir)  # refused before training, not after
    echo "some text" >"$tmp/c.txt"
    run train-tokenizer --input "$tmp/c.txt" --output-prefix "$tmp/no/such/dir/m"
    expect_error "--output-prefix .*/no/such/dir/m: directory .*/no/such/dir does not exist" ;;
  train_missing_input)
    run train-tokenizer --input "$tmp/none.txt" --output-prefix "$tmp/m"
    expect_error "--input .*none.txt: file not found" ;;
  train_bad_model_type)
    echo "some text" >"$tmp/c.txt"
    run train-tokenizer --input "$tmp/c.txt" --model-type word
    expect_error "--model-type 'word' is not one of: bpe, unigram" ;;
  train_bad_json)
    printf '{"text": "fine"}\n{"text": "also fine"}\n{"text": broken}\n' >"$tmp/c.jsonl"
    run train-tokenizer --input "$tmp/c.jsonl" --output-prefix "$tmp/m"
    expect_error "--input .*c.jsonl line 3: not a JSON object" ;;
  train_missing_key)
    printf '{"text": "fine"}\n{"body": "no text"}\n' >"$tmp/c.jsonl"
    run train-tokenizer --input "$tmp/c.jsonl" --output-prefix "$tmp/m"
    expect_error "--input .*c.jsonl line 2: no string field \"text\" \(--json-keys\)" ;;
  train_vocab_too_large)  # SentencePiece's reason, in claw's flag names
    printf 'a tiny corpus\nof two lines\n' >"$tmp/c.txt"
    run train-tokenizer --input "$tmp/c.txt" --vocab-size 5000 --output-prefix "$tmp/m"
    expect_error "SentencePiece training failed: Vocabulary size \(--vocab-size\) .*[0-9]+" ;;
  train_and_tokenize)  # a model trained from JSONL loads and encodes with eod = </s>
    for i in $(seq 1 300); do echo "{\"text\": \"document $i says hello to the world, line $((i * 7))\"}"; done >"$tmp/c.jsonl"
    "$claw" train-tokenizer --input "$tmp/c.jsonl" --vocab-size 400 --output-prefix "$tmp/m" 2>/dev/null ||
      { echo "FAIL: train"; exit 1; }
    run tokenize --tokenizer-type SentencePieceTokenizer --tokenizer-model "$tmp/m.model" --special <<<"hello</s>world"
    [[ $rc -eq 0 && $out == *" 2 "* ]] || { echo "FAIL: </s> is not id 2: $out $err"; exit 1; }
    printf '%s\n' "$out" | "$claw" tokenize --tokenizer-type SentencePieceTokenizer --tokenizer-model "$tmp/m.model" --decode |
      grep -qx "hello</s>world" || { echo "FAIL: decode"; exit 1; }
    echo "ok: $out" ;;
  *) echo "FAIL: unknown case $case_name"; exit 2 ;;
esac
