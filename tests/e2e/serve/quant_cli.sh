#!/usr/bin/env bash
# Low-precision weights and KV cache end to end, on a model claw trained:
#   - perplexity on held-out text (a speech after the training split's) at
#     each weight type: bf16 and q8_0 within 0.5% of f32, q4_0 within 5%;
#   - a GGUF file of each type gives bitwise the perplexity of --dtype on
#     the checkpoint (its blocks are what claw's quantization makes);
#   - generation with the KV cache in bf16 and int8, and bad --dtype,
#     --kv-cache-dtype and --type values named in one clear line.
#
#   quant_cli.sh CLAW_BINARY [MODEL]   (MODEL: the fixture serve_model's checkpoint; else trained here)
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
ck=${2:-$tmp/ck}
data=${CLAW_DATA_DIR:-$(cd "$(dirname "$0")/../../.." && pwd)/data}
held_out=$data/sotu/2021_joseph_r_biden_d.txt
[[ -f $held_out ]] || fail "$held_out missing (scripts/fetch-data)"

[[ -d $ck ]] || "$(dirname "$0")/model_fixture.sh" "$claw" "$ck" >/dev/null
ppl() { "$claw" perplexity --text-file "$held_out" --ctx-size 64 --chunks 40 --num-threads 2 --output-format json \
  "$@" 2>"$tmp/ppl.log" || { cat "$tmp/ppl.log"; exit 1; }; }
for t in f32 bf16 q8_0 q4_0; do
  ppl --model "$ck" --dtype $t >"$tmp/$t.json"
  "$claw" ckpt export --load "$ck" --format gguf --type $t --output "$tmp/$t.gguf" >/dev/null 2>&1
  ppl --model "$tmp/$t.gguf" >"$tmp/$t-gguf.json"
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
r = {t: json.load(open(f"{d}/{t}.json")) for t in ("f32", "bf16", "q8_0", "q4_0")}
g = {t: json.load(open(f"{d}/{t}-gguf.json")) for t in r}
base = r["f32"]["perplexity"]
for t, limit in (("bf16", 0.005), ("q8_0", 0.005), ("q4_0", 0.05)):
    rel = r[t]["perplexity"] / base - 1
    print(f"{t}: perplexity {r[t]['perplexity']:.3f} vs f32 {base:.3f} ({100 * rel:+.3f}%, limit {100 * limit:.1f}%)")
    assert abs(rel) <= limit, (t, rel)
for t in r:
    assert g[t]["weights"] == t and g[t]["perplexity"] == r[t]["perplexity"], (t, g[t], r[t])
print("GGUF files: the same perplexity as --dtype, bitwise, at every type")
PY

prompt="Fellow citizens of the Senate and of the House of Representatives, the"
for kv in bf16 int8 f16; do
  flags=(--kv-cache-dtype $kv)
  [[ $kv == f16 ]] && flags=(--cache-type-k $kv --cache-type-v $kv)  # llama.cpp's names
  "$claw" generate --model "$ck" --prompt "$prompt" --max-tokens 16 "${flags[@]}" --output-format json \
    --num-threads 2 >"$tmp/kv.json" 2>"$tmp/kv.log" || { cat "$tmp/kv.log"; exit 1; }
  grep -q "blocks of 16 tokens in $kv" "$tmp/kv.log" || { cat "$tmp/kv.log"; fail "${flags[*]} not used"; }
  /usr/bin/python3 -c "import json,sys; o=json.load(open(sys.argv[1])); assert len(o['tokens']) == 16, o" "$tmp/kv.json"
done
expect_error() {  # expected text, then the command
  local want=$1; shift
  if "$@" >"$tmp/out" 2>&1; then fail "accepted: $*"; fi
  grep -q -- "$want" "$tmp/out" || { cat "$tmp/out"; fail "no '$want' in the error of: $*"; }
}
expect_error "--dtype 'q7_k': valid are auto, f32, bf16, f16, q8_0, q6_k, q5_k, q5_1, q5_0, q4_k, q4_1, q4_0, iq4_nl" \
  "$claw" generate --model "$ck" --prompt x --dtype q7_k
expect_error "--kv-cache-dtype 'fp8': valid are" "$claw" generate --model "$ck" --prompt x --kv-cache-dtype fp8
expect_error "--cache-type-k q8_0 and --cache-type-v f16: claw holds keys and values in one type" \
  "$claw" generate --model "$ck" --prompt x --cache-type-k q8_0 --cache-type-v f16
expect_error "--type 'q2': valid GGUF types are f32, bf16, f16, q8_0, q4_0 (every matrix), q6_k, q5_k_m" \
  "$claw" ckpt export --load "$ck" --format gguf --type q2 --output "$tmp/x.gguf"
head -c 100 "$tmp/q8_0.gguf" >"$tmp/cut.gguf"
expect_error "cut.gguf" "$claw" generate --model "$tmp/cut.gguf" --prompt x
echo "bad --dtype, --kv-cache-dtype, --cache-type-k/-v, --type and a truncated GGUF file: clear errors"

# A GGUF file's own chat template (written by `ckpt export --chat-template`):
# `claw serve` renders chats with it unless --chat-template names another.
source "$(dirname "$0")/wait_for_server.sh"
printf '%s' '{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}' \
  >"$tmp/own.jinja"
"$claw" ckpt export --load "$ck" --format gguf --output "$tmp/own.gguf" --chat-template "$tmp/own.jinja" >/dev/null
# A Hugging Face export writes the tokenizer beside config.json, the template in tokenizer_config.json.
"$claw" ckpt export --load "$ck" --output "$tmp/hf" --chat-template "$tmp/own.jinja" >/dev/null
/usr/bin/python3 - "$tmp/hf" "$tmp/own.jinja" <<'PY' || fail "the Hugging Face export's tokenizer files"
import json, os, sys
d, jinja = sys.argv[1:3]
config = json.load(open(os.path.join(d, "tokenizer_config.json")))
assert config["chat_template"] == open(jinja).read() and config["tokenizer_class"] == "GPT2Tokenizer", config
assert json.load(open(os.path.join(d, "generation_config.json")))["eos_token_id"] == 50256
assert os.path.getsize(os.path.join(d, "vocab.json")) > 0 and os.path.getsize(os.path.join(d, "merges.txt")) > 0
PY
prompt_tokens() {  # prompt_tokens ARGS...: the chat's prompt tokens as `claw serve ARGS` counts them
  "$claw" serve --model "$tmp/own.gguf" --port 0 --num-threads 1 "$@" >"$tmp/serve.log" 2>&1 &
  local pid=$!
  wait_for_server $pid "$tmp/serve.log"
  curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 1}' |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["usage"]["prompt_tokens"])'
  kill $pid
  wait $pid || true
}
own=$(prompt_tokens)
grep -q "chat template GGUF .*own.gguf .* chat template" "$tmp/serve.log" || { cat "$tmp/serve.log"; fail "not the file's template"; }
same=$(prompt_tokens --chat-template "$tmp/own.jinja")
plain=$(prompt_tokens --chat-template plain)
[[ $own == "$same" && $own != "$plain" ]] || fail "prompt tokens: own $own, the same file $same, plain $plain"
echo "a GGUF file's chat template: $own prompt tokens, as with --chat-template on its source ($same; plain: $plain)"
