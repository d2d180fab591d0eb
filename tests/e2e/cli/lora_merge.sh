#!/usr/bin/env bash
# LoRA adapters through a checkpoint: `claw train --lora-rank` saves the base
# and the adapters; generation from it (adapters merged at load) equals
# generation from `claw ckpt merge-lora`'s plain checkpoint (log-probabilities
# within 1e-5) and differs from the base model (the adapters learned
# something); Hugging Face export of the unmerged checkpoint is refused with
# the command to run first.
#
#   lora_merge.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
claw=$1
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2
        --global-batch-size 2 --lr-warmup-iters 1 --num-threads 2 --peak-gflops 100 --eval-interval 0)
"$claw" train "${common[@]}" --train-iters 3 --lr 2e-3 --save "$tmp/base" >"$tmp/base.log" 2>&1 ||
  { cat "$tmp/base.log"; fail "base training"; }
"$claw" train "${common[@]}" --train-iters 10 --lr 2e-2 --min-lr 2e-3 --load "$tmp/base" --finetune --lora-rank 4 \
  --lora-alpha 8 --lora-target-modules c_attn,c_fc --save "$tmp/lora" >"$tmp/lora.log" 2>&1 ||
  { cat "$tmp/lora.log"; fail "LoRA training"; }
grep -q "has no LoRA adapters: they start fresh" "$tmp/lora.log" || fail "the base checkpoint's missing adapters were not reported"
"$claw" ckpt merge-lora --load "$tmp/lora" --save "$tmp/merged" >"$tmp/merge.log" 2>&1 || { cat "$tmp/merge.log"; fail "merge-lora"; }
for m in base lora merged; do
  "$claw" generate -m "$tmp/$m" --prompt-tokens 464,3290,286,262 -n 12 --ignore-eos --output-format json \
    >"$tmp/$m.json" 2>"$tmp/$m.err" || { cat "$tmp/$m.err"; fail "generate from $m"; }
done
/usr/bin/python3 - "$tmp" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
g = {m: json.load(open(f"{d}/{m}.json")) for m in ("base", "lora", "merged")}
lo, me, ba = g["lora"]["logprobs"], g["merged"]["logprobs"], g["base"]["logprobs"]
assert g["lora"]["tokens"] == g["merged"]["tokens"], (g["lora"]["tokens"], g["merged"]["tokens"])
worst = max(abs(a - b) for a, b in zip(lo, me))
assert worst < 1e-5, f"merged log-probabilities differ by {worst}"
moved = max(abs(a - b) for a, b in zip(lo, ba)) if g["lora"]["tokens"] == g["base"]["tokens"] else float("inf")
assert moved > 1e-3, f"the adapters changed nothing ({moved})"
print(f"ok: adapters merged at load and by merge-lora agree within {worst:.1e}; they moved the base by {moved:.3g}")
PY
out=$("$claw" ckpt export --load "$tmp/lora" --output "$tmp/hf" 2>&1) && fail "exporting unmerged adapters to HF was not refused"
grep -q "claw ckpt merge-lora --load" <<<"$out" || fail "the refusal does not say what to run: $out"
echo "ok: $(tail -n 1 <<<"$out")"
