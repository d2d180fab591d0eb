#!/usr/bin/env bash
# A model directory as the Hub ships one (random Llama 3 or Qwen 2 weights that
# transformers saves, a real tokenizer.json shape and chat template):
# `claw tokenize --chat` and `claw serve` give the same prompt ids as
# transformers' apply_chat_template, and `claw preprocess --sft` the same
# tokens with the loss on exactly the assistant turns, and `claw ckpt import`
# + `export --format hf` keep tokenizer and template (hf_chat_e2e.py).
#
#   hf_chat_e2e.sh CLAW_BINARY llama3|qwen2
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
family=$2
repo=$(cd "$here/../../.." && pwd)
py=$("$repo/tests/oracle_env.sh" hf)
llama_cpp=$("$repo/tools/llamacpp_sdist.sh")
dir=$tmp/$family
"$py" "$here/hf_chat_e2e.py" make "$family" "$dir" "$llama_cpp/models" "$llama_cpp/models/templates"
"$py" "$here/hf_chat_e2e.py" expect "$dir" "$tmp/expected.json"
n=$(/usr/bin/python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["cases"]))' "$tmp/expected.json")

# claw tokenize --chat: the template rendered, then its ids (the last line).
for ((i = 0; i < n; i++)); do
  /usr/bin/python3 -c 'import json, sys; json.dump(json.load(open(sys.argv[1]))["cases"][int(sys.argv[2])]["messages"], sys.stdout)' \
    "$tmp/expected.json" $i >"$tmp/conv$i.json"
  "$claw" tokenize --tokenizer-type HFTokenizer --tokenizer-model "$dir" --chat "$tmp/conv$i.json" >"$tmp/tok$i.txt"
  tail -n 1 "$tmp/tok$i.txt" >>"$tmp/tokenize.txt"
done

# claw serve --model DIR: the directory's own tokenizer and template.
source "$here/../serve/wait_for_server.sh"
"$claw" serve --model "$dir" --port 0 --num-threads 2 --max-model-len 512 >"$tmp/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; claw_test_cleanup' EXIT
wait_for_server $pid "$tmp/serve.log"
for ((i = 0; i < n; i++)); do
  /usr/bin/python3 -c 'import json, sys; print(json.dumps({"messages": json.load(open(sys.argv[1])), "max_tokens": 1, "return_token_ids": True}))' \
    "$tmp/conv$i.json" >"$tmp/req$i.json"
  curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d @"$tmp/req$i.json" \
    >>"$tmp/serve.jsonl" || { tail -20 "$tmp/serve.log"; fail "chat request $i"; }
  echo >>"$tmp/serve.jsonl"
done
grep -q "chat template Hugging Face .* chat template" "$tmp/serve.log" || { cat "$tmp/serve.log"; fail "serve did not use the directory's template"; }

# claw preprocess --sft: the conversations that end with a reply.
/usr/bin/python3 -c '
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    if c["messages"][-1]["role"] == "assistant":
        print(json.dumps({"messages": c["messages"]}, ensure_ascii=False))' "$tmp/expected.json" >"$tmp/sft.jsonl"
"$claw" preprocess --input "$tmp/sft.jsonl" --output-prefix "$tmp/sft" --sft --tokenizer-type HFTokenizer \
  --tokenizer-model "$dir" --workers 1 >"$tmp/preprocess.log" 2>&1 || { cat "$tmp/preprocess.log"; fail "preprocess --sft"; }
"$py" "$here/hf_chat_e2e.py" check "$tmp/expected.json" "$tmp/tokenize.txt" "$tmp/serve.jsonl" "$tmp/sft_sft_document"

# claw train --sft --load-hf DIR: the directory's tokenizer marks the data's ends (its eos, not GPT-2's).
eod=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["eod"])' "$tmp/expected.json")
"$claw" train --sft --load-hf "$dir" --data-path "$tmp/sft_sft_document" --seq-length 64 --micro-batch-size 1 \
  --global-batch-size 1 --train-iters 1 --lr 1e-4 --split 100,0,0 --num-threads 2 >"$tmp/train.log" 2>&1 ||
  { tail -20 "$tmp/train.log"; fail "train --sft --load-hf"; }
grep -q "packing: .*eod $eod)" "$tmp/train.log" || { grep "data:" "$tmp/train.log"; fail "train did not use eod $eod"; }
echo "train --sft --load-hf: the directory's tokenizer (eod $eod)"

# Through a claw checkpoint and back: the tokenizer and template go along.
"$claw" ckpt import --format hf --input "$dir" --save "$tmp/ck" >/dev/null
"$claw" ckpt export --load "$tmp/ck" --format hf --output "$tmp/exported" >"$tmp/export.log" ||
  { cat "$tmp/export.log"; fail "export"; }
grep -q "tokenizer.json and tokenizer_config.json" "$tmp/export.log" || { cat "$tmp/export.log"; fail "no tokenizer exported"; }
"$py" "$here/hf_chat_e2e.py" roundtrip "$tmp/expected.json" "$tmp/exported"
