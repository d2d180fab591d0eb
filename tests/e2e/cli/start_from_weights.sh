#!/usr/bin/env bash
# Runs that start from weights take the model from them, and every training
# loop keeps the training choices it is given (train/job.h builds each):
#   lora_over_hf   claw train --load-hf DIR --lora-rank 4: the configuration
#                  says rank 4, the base is frozen, and the checkpoint
#                  exports as a PEFT adapter;
#   finetune_shape claw train --load CKPT --finetune with no shape flag on an
#                  imported Hugging Face Llama trains; a shape flag or a
#                  --model preset that disagrees is a one-line error naming
#                  both values, before anything is allocated;
#   rl_fp16        claw rl --fp16 scales its loss (the metrics carry the
#                  scale), and claw rl refuses the flags its learners cannot
#                  apply (--diloco-inner-steps, fp16 master weights).
#   start_from_weights.sh CLAW_BINARY CASE
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2
small=(--micro-batch-size 2 --global-batch-size 4 --seq-length 32 --eval-interval 0 --peak-gflops 100
       --num-threads 2)
fail() { echo "FAIL: $*" >&2; exit 1; }
quiet() { "$@" >"$tmp/log" 2>&1 || { tail -20 "$tmp/log"; fail "$*"; }; }
# refuse PATTERN CMD...: exit 1, one error line matching PATTERN, no step run
refuse() {
  local pattern=$1
  shift
  "$@" >"$tmp/err" 2>&1 && fail "accepted: $*"
  local last
  last=$(tail -n 1 "$tmp/err")
  [[ $last == "claw: error: "* ]] || fail "not a claw error: $last"
  grep -qE -- "$pattern" <<<"$last" || fail "error does not match /$pattern/: $last"
  grep -q "step 1/" "$tmp/err" && fail "a step ran before the error"
  echo "ok refused: $last"
}
# A llama-tiny base exported as a Hugging Face directory.
hf_base() {
  quiet "$claw" train --model llama-tiny --train-iters 2 "${small[@]}" --save "$tmp/base"
  quiet "$claw" ckpt export --load "$tmp/base" --format hf --output "$tmp/hf"
}

case $case_name in
  lora_over_hf)
    hf_base
    quiet "$claw" train --load-hf "$tmp/hf" --lora-rank 4 --lora-alpha 8 --train-iters 2 "${small[@]}" --save "$tmp/lora"
    grep -qE "^  lora-rank +4$" "$tmp/log" || fail "the configuration does not say lora-rank 4"
    grep -qE "M frozen: no gradients or optimizer state" "$tmp/log" || fail "the base weights train"
    quiet "$claw" ckpt export --load "$tmp/lora" --format peft --output "$tmp/peft"
    grep -q "exported the rank-4 LoRA adapters" "$tmp/log" || fail "no adapters exported"
    [[ -s $tmp/peft/adapter_model.safetensors ]] || fail "no adapter_model.safetensors"
    echo "ok: --load-hf with --lora-rank 4 trains adapters and exports them for PEFT" ;;
  finetune_shape)
    hf_base
    quiet "$claw" ckpt import --format hf --input "$tmp/hf" --save "$tmp/imported"
    quiet "$claw" train --load "$tmp/imported" --finetune --train-iters 2 "${small[@]}"
    grep -qE "^  normalization +RMSNorm$" "$tmp/log" && grep -qE "^  num-query-groups +2$" "$tmp/log" ||
      fail "the model is not the checkpoint's Llama"
    grep -q "step 2/2" "$tmp/log" || fail "no steps"
    echo "ok: --finetune from an imported Llama with no shape flags"
    refuse "--hidden-size 128 disagrees with checkpoint .*imported/iter_0000000, whose model has --hidden-size 256" \
      "$claw" train --load "$tmp/imported" --finetune --hidden-size 128 "${small[@]}"
    refuse "--model gpt2-tiny has --num-attention-heads 4, but checkpoint .* holds a model with --num-attention-heads 8" \
      "$claw" train --model gpt2-tiny --load "$tmp/imported" --finetune "${small[@]}"
    refuse "--num-layers 2 disagrees with --load-hf .*hf, whose model has --num-layers 4" \
      "$claw" train --load-hf "$tmp/hf" --num-layers 2 "${small[@]}" ;;
  rl_fp16)
    printf '%s\n' '{"messages": [{"role": "user", "content": "Reverse: a b"}, {"role": "assistant", "content": "b a"}]}' \
      >"$tmp/prompts.jsonl"
    rl=("$claw" rl --model gpt2-tiny --num-layers 1 --eval-interval 0 --num-threads 2 --prompt-data "$tmp/prompts.jsonl"
        --global-batch-size 8 --micro-batch-size 8 --num-generations 8 --seq-length 32 --max-new-tokens 4)
    quiet "${rl[@]}" --train-iters 2 --fp16 --metrics-file "$tmp/m.jsonl"
    /usr/bin/python3 - "$tmp/m.jsonl" <<'PY' || fail "no loss scale in claw rl --fp16's metrics"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 2 and all(r["loss_scale"] > 1 for r in recs), recs
print(f"ok: claw rl --fp16 trained at loss scale {recs[0]['loss_scale']:g}")
PY
    refuse "--diloco-inner-steps 2 with claw rl: the learners take every step together" "${rl[@]}" --diloco-inner-steps 2
    refuse "--main-params-dtype f16 with claw rl: the learners publish fp32 weights" "${rl[@]}" --main-params-dtype fp16 ;;
  *) fail "unknown case $case_name" ;;
esac
