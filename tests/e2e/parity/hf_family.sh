#!/usr/bin/env bash
# A model family made by `transformers` through claw (hf_family.py is the
# oracle; transformers 4.49 from tools/hf_env.sh's venv under /tmp, or 4.57
# over PyPI's torch 2.5 from tools/torch2_env.sh's for Qwen 3, Qwen3-MoE,
# Gemma and DeepSeek-V3, whose cache needs torch 2).
#
#   hf_family.sh CLAW_BINARY qwen2|qwen3|qwen3moe|mistral|phi3|mixtral|llama3|gemma2|gemma3|olmo2|deepseek3
#
# 1. a random model of the family, saved by transformers, imported with
#    `claw ckpt import --format hf`: `claw eval`'s logits equal transformers'
#    (1e-5 relative) on two 32-token sequences;
# 2. one training step: the loss and the gradient of every parameter equal
#    transformers' (float64 from the same weights; 1e-5 of each tensor's largest);
# 3. `claw ckpt export --format hf` of the import gives the original's tensors
#    bit for bit and a config of the same class with the same fields;
# 4. 32 greedy tokens of `claw generate` on the directory as transformers saved
#    it (the serving engine's paged KV cache, prefilled in chunks of 4 and
#    whole) equal generate()'s;
# 5. `claw ckpt export --format gguf` (f32) loads in llama.cpp (built from the
#    llama-cpp-python sdist, tools/llamacpp_greedy.sh) and its 32 greedy tokens
#    equal claw's on the Hugging Face directory, as do claw's own from the
#    file. Mistral and Phi-3 are made without their window, Qwen3-MoE with
#    experts in every layer and DeepSeek-V3 with rms_norm_eps 1e-6 for this
#    (llama.cpp has no window there, no dense Qwen3-MoE layer, one epsilon
#    for all of DeepSeek's norms); Llama 3.1's RoPE scaling has no GGUF
#    form in claw yet.
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
family=$2
env=hf
[[ $family != qwen3* && $family != gemma* && $family != deepseek* ]] || env=torch2
py=$("$here/../../oracle_env.sh" $env)
hf() { "$py" "$here/hf_family.py" "$@" 2> >(grep -v -e Warning -e warn >&2); }
quiet() { "$@" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }; }
evalf=(--eval-iters 1 --micro-batch-size 2 --global-batch-size 2 --seq-length 32 --num-threads 2)

hf make "$family" "$tmp/hf"
quiet "$claw" ckpt import --format hf --input "$tmp/hf" --save "$tmp/imported"
quiet "$claw" eval --load "$tmp/imported" "${evalf[@]}" --logits-file "$tmp/logits.st" --grads-file "$tmp/grads.st"
quiet "$claw" ckpt export --load "$tmp/imported" --format hf --output "$tmp/hf_again"
prompt=17,250,3,999,42,7,512,88,1,640
hf check "$tmp/hf" "$tmp/logits.st" "$tmp/grads.st" "$tmp/hf_again" 32 "$prompt" "$tmp/hf.json"
for chunk in 4 0; do
  flags=(--num-threads 2)
  [[ $chunk == 0 ]] || flags+=(--max-num-batched-tokens "$chunk")
  "$claw" generate --model "$tmp/hf" --prompt-tokens "$prompt" --max-tokens 32 --ignore-eos --output-format json \
    "${flags[@]}" >"$tmp/claw.json" 2>"$tmp/claw.log" || { cat "$tmp/claw.log"; exit 1; }
  /usr/bin/python3 - "$tmp/hf.json" "$tmp/claw.json" "$chunk" <<'PY'
import json, sys
hf, claw = (json.load(open(p)) for p in sys.argv[1:3])
first = next((i for i, (a, b) in enumerate(zip(hf["tokens"], claw["tokens"])) if a != b), None)
assert claw["tokens"] == hf["tokens"], (
    f"claw differs from transformers at token {first}: claw {claw['tokens']}\nhf {hf['tokens']}\n"
    f"logit gap there {hf['gaps'][first] if first is not None else None}")
how = f"prefill chunks of {sys.argv[3]}" if sys.argv[3] != "0" else "whole prefill"
print(f"generate ({how}): 32 greedy tokens equal; smallest top-1/top-2 logit gap {min(hf['gaps']):.4f}")
PY
done

[[ $family != llama3 ]] || exit 0
gguf_dir=$tmp/imported
case $family in
  mistral|phi3|qwen3moe|deepseek3)  # as llama.cpp can run them
    hf make "$family" "$tmp/hf_llamacpp" llamacpp
    quiet "$claw" ckpt import --format hf --input "$tmp/hf_llamacpp" --save "$tmp/imported_llamacpp"
    gguf_dir=$tmp/imported_llamacpp ;;
esac
hf_src=$tmp/hf
[[ $gguf_dir == "$tmp/imported" ]] || hf_src=$tmp/hf_llamacpp
"$claw" ckpt export --load "$gguf_dir" --format gguf --type f32 --output "$tmp/m.gguf" >"$tmp/export.log" 2>&1 ||
  { cat "$tmp/export.log"; exit 1; }
grep "note:" "$tmp/export.log" || true
# Phi-3.5: a prompt past its original context of 16, where llama.cpp's LongRoPE (long factors for a
# long context) and the model's (long once a sequence is longer) agree from the first token.
[[ $family != phi3long ]] || prompt=17,250,3,999,42,7,512,88,1,640,5,77,1200,9,31,400,2,800,66,123
"$here/../../../tools/llamacpp_greedy.sh" "$tmp/m.gguf" "$prompt" 32 2 >"$tmp/llamacpp.json" 2>"$tmp/llamacpp.log" ||
  { tail -20 "$tmp/llamacpp.log"; fail "llama.cpp did not run claw's GGUF"; }
for src in "$hf_src" "$tmp/m.gguf"; do
  "$claw" generate --model "$src" --prompt-tokens "$prompt" --max-tokens 32 --ignore-eos --output-format json \
    --num-threads 2 >"$tmp/claw-$(basename "$src").json" 2>"$tmp/claw.log" || { cat "$tmp/claw.log"; exit 1; }
done
/usr/bin/python3 - "$tmp/llamacpp.json" "$tmp/claw-$(basename "$hf_src").json" "$tmp/claw-m.gguf.json" \
  "$(grep -o 'GGUF [a-z0-9]*' "$tmp/export.log" | head -1)" <<'PY'
import json, sys
ref, claw, back = (json.load(open(p)) for p in sys.argv[1:4])
first = lambda a, b: next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
assert len(ref["tokens"]) == 32, ref
assert claw["tokens"] == ref["tokens"], (
    f"llama.cpp differs from claw at token {first(claw['tokens'], ref['tokens'])}: claw {claw['tokens']}\n"
    f"llama.cpp {ref['tokens']}")
assert back["tokens"] == claw["tokens"], f"claw reading its GGUF differs at token {first(back['tokens'], claw['tokens'])}"
print(f"{sys.argv[4]} (f32): llama.cpp's 32 greedy tokens equal claw's (smallest llama.cpp logit gap "
      f"{min(ref['gaps']):.4f}); claw reads the file back to the same tokens")
PY
