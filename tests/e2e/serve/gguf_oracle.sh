#!/usr/bin/env bash
# GGUF interchange, against llama.cpp's `gguf` reader and transformers'
# GGUF loader: a random GPT-2 or Llama (GQA) model that transformers made,
# imported into claw and exported with `claw ckpt export --format gguf` at
# each --type:
#   - the reader sees the tensors in that type, and transformers rebuilds
#     the model from the file within the type's rounding;
#   - at f32, transformers' greedy tokens (64) from the file equal claw's
#     from the same file and from the Hugging Face directory, and so do
#     llama.cpp's own (tools/llamacpp_greedy.sh);
#   - at q8_0 and q4_0, claw reading the file (its blocks as stored) gives
#     bitwise the tokens and log-probabilities of claw quantizing the
#     Hugging Face weights itself (--dtype).
#
#   gguf_oracle.sh CLAW_BINARY gpt2|llama
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
family=$2
py=$("$here/../../oracle_env.sh" hf)

"$py" "$here/hf_generate.py" make "$family" "$tmp/hf"
"$claw" ckpt import --input "$tmp/hf" --save "$tmp/ck" >/dev/null 2>&1
for t in f32 bf16 f16 q8_0 q4_0; do
  "$claw" ckpt export --load "$tmp/ck" --format gguf --type $t --output "$tmp/m-$t.gguf" >/dev/null 2>&1
  "$py" "$here/gguf_oracle.py" check "$tmp/hf" $t "$tmp/m-$t.gguf" 2>/dev/null
done

prompt=17,250,3,999,42,7,512,88,1,640
gen() { "$claw" generate --prompt-tokens "$prompt" --max-tokens 64 --ignore-eos --output-format json --logprobs 2 \
  --num-threads 2 "$@" 2>"$tmp/claw.log" || { cat "$tmp/claw.log"; exit 1; }; }
"$py" "$here/gguf_oracle.py" generate "$tmp/m-f32.gguf" 64 "$prompt" >"$tmp/hf.json" 2>/dev/null
gen --model "$tmp/m-f32.gguf" >"$tmp/claw-gguf.json"
gen --model "$tmp/hf" >"$tmp/claw-hf.json"
"$here/../../../tools/llamacpp_greedy.sh" "$tmp/m-f32.gguf" "$prompt" 64 2 >"$tmp/llamacpp.json" 2>"$tmp/llamacpp.log" ||
  { tail -20 "$tmp/llamacpp.log"; fail "llama.cpp did not run the f32 file"; }
/usr/bin/python3 - "$tmp/hf.json" "$tmp/claw-gguf.json" "$tmp/claw-hf.json" "$tmp/llamacpp.json" <<'PY'
import json, sys
hf, claw, direct, llamacpp = (json.load(open(p)) for p in sys.argv[1:5])
assert len(hf["tokens"]) == 64, hf
d = next((i for i, (a, b) in enumerate(zip(hf["tokens"], claw["tokens"])) if a != b), None)
assert claw["tokens"] == hf["tokens"], f"claw differs from transformers at token {d}: {claw['tokens']} vs {hf['tokens']}"
assert direct["tokens"] == claw["tokens"], "the f32 GGUF and the Hugging Face directory give different tokens"
d = next((i for i, (a, b) in enumerate(zip(llamacpp["tokens"], claw["tokens"])) if a != b), None)
assert llamacpp["tokens"] == claw["tokens"], f"llama.cpp differs from claw at token {d}: {llamacpp['tokens']}"
print(f"f32 GGUF: 64 greedy tokens equal to transformers' and llama.cpp's from the same file (smallest logit gap "
      f"{min(hf['gaps']):.4f})")
PY
for t in f16 q8_0 q4_0; do
  gen --model "$tmp/m-$t.gguf" >"$tmp/a.json"
  grep -q "GGUF .*($family, $t)" "$tmp/claw.log" || { cat "$tmp/claw.log"; fail "the $t file did not load as $t"; }
  gen --model "$tmp/hf" --dtype $t >"$tmp/b.json"
  cmp -s "$tmp/a.json" "$tmp/b.json" || fail "$t: the file's blocks and claw's own $t quantization disagree"
  echo "$t GGUF: tokens and log-probabilities bitwise those of --dtype $t on the Hugging Face weights"
done
# claw's F16 file in llama.cpp, and as llama-quantize's input: llama.cpp's
# greedy tokens from it equal claw's; the Q4_K_M that llama-quantize makes of
# it (rows of 64 are not whole super-blocks: llama-quantize falls back to
# q5_0, q5_1 and q8_0) loads in claw and runs in both (how far their tokens
# agree is printed: 8-bit activations make the logits of two exact
# implementations differ by about 1e-2, gguf_quants.py).
bin=$("$here/../../../tools/llamacpp_build.sh" llama llama-quantize)/bin
"$bin/llama-quantize" "$tmp/m-f16.gguf" "$tmp/m-q4_k_m.gguf" Q4_K_M 2 >"$tmp/quantize.log" 2>&1 ||
  { tail -20 "$tmp/quantize.log"; fail "llama-quantize did not take claw's F16 file"; }
for t in f16 q4_k_m; do
  gen --model "$tmp/m-$t.gguf" >"$tmp/claw-$t.json"
  "$here/../../../tools/llamacpp_greedy.sh" "$tmp/m-$t.gguf" "$prompt" 64 2 >"$tmp/llamacpp-$t.json" \
    2>"$tmp/llamacpp.log" || { tail -20 "$tmp/llamacpp.log"; fail "llama.cpp did not run the $t file"; }
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
for t in ("f16", "q4_k_m"):
    claw, ref = (json.load(open(f"{tmp}/{who}-{t}.json")) for who in ("claw", "llamacpp"))
    same = next((i for i, (a, b) in enumerate(zip(claw["tokens"], ref["tokens"])) if a != b), 64)
    if t == "f16":
        assert same == 64, f"llama.cpp differs from claw on claw's F16 file at token {same}: {ref['tokens']}"
        print(f"claw's F16 GGUF in llama.cpp: 64 greedy tokens equal claw's (smallest gap {min(ref['gaps']):.4f})")
    else:
        print(f"llama-quantize's Q4_K_M of claw's F16: claw and llama.cpp give the same {same} of 64 greedy tokens "
              + ("" if same == 64 else f"(then llama.cpp's top-2 gap is {ref['gaps'][same]:.1e})"))
PY
