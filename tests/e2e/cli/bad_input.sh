#!/usr/bin/env bash
# Bad input must give a one-line error naming the flag or file and what would
# be valid, before any training step (or, for a non-finite loss, with the step
# number and the first non-finite tensor), and end with the exit code of its
# kind (README "Exit codes"): 1 bad input, 2 usage, 5 non-finite loss.
#   bad_input.sh CLAW_BINARY CASE
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2
small=(--train-iters 2 --eval-interval 0 --micro-batch-size 2 --seq-length 32 --num-threads 2)

run() {  # run ARGS... ; sets out, rc
  out=$("$claw" train "$@" 2>&1)
  rc=$?
}
rl() {  # rl ARGS...: claw rl on a tiny model; sets out, rc
  out=$("$claw" rl --model gpt2-tiny --num-layers 1 --train-iters 1 --eval-interval 0 --num-threads 2 "$@" 2>&1)
  rc=$?
}
prompts() {  # a prompt file of the reversal task
  printf '%s\n' '{"messages": [{"role": "user", "content": "Reverse: a b"}, {"role": "assistant", "content": "b a"}]}' \
    >"$tmp/prompts.jsonl"
  echo "$tmp/prompts.jsonl"
}
want_rc=1
expect_error() {  # expect_error PATTERN: exit code $want_rc, last line is the error, matches PATTERN, no step ran
  local pattern=$1
  local last
  last=$(printf '%s\n' "$out" | tail -n 1)
  if [[ $rc -ne $want_rc ]]; then echo "FAIL: exit code $rc, expected $want_rc"; printf '%s\n' "$out" | tail -5; exit 1; fi
  if [[ $last != "claw: error: "* ]]; then echo "FAIL: last line is not a claw error: $last"; exit 1; fi
  if ! grep -qE -- "$pattern" <<<"$last"; then echo "FAIL: error does not match /$pattern/: $last"; exit 1; fi
  if [[ ${3:-} != allow-steps ]] && grep -q "step 1/" <<<"$out"; then echo "FAIL: training started"; exit 1; fi
  echo "ok: $last"
}

# A private copy of the built-in corpus for the file cases (built on demand).
corpus() {
  "$claw" train "${small[@]}" --train-iters 0 >/dev/null 2>&1 || true
  local dir=${CLAW_DATA_DIR:?}
  cp "$dir/sotu_gpt2_text_document.bin" "$dir/sotu_gpt2_text_document.idx" "$tmp/"
  echo "$tmp/sotu_gpt2_text_document"
}

case $case_name in
  hidden_not_divisible)
    run "${small[@]}" --hidden-size 250
    expect_error "--hidden-size 250 is not divisible by --num-attention-heads 4" ;;
  seq_longer_than_positions)
    run "${small[@]}" --seq-length 2048
    expect_error "--seq-length 2048 exceeds --max-position-embeddings 1024" ;;
  unknown_preset)
    run "${small[@]}" --model gpt5-tiny
    expect_error "unknown --model 'gpt5-tiny'; valid presets: gpt2-tiny, gpt2-124m, llama-tiny" ;;
  unknown_flag)
    run "${small[@]}" --num-layer 3
    want_rc=2
    expect_error "unknown flag --num-layer \(see" ;;
  bad_value)
    run "${small[@]}" --num-layers three
    expect_error "--num-layers expects an integer, got 'three'" ;;
  missing_data)
    run "${small[@]}" --data-path "$tmp/nothing_here"
    expect_error "$tmp/nothing_here.idx" ;;
  truncated_data)
    prefix=$(corpus)
    size=$(stat -c %s "$prefix.bin")
    truncate -s $((size / 2)) "$prefix.bin"
    run "${small[@]}" --data-path "$prefix"
    expect_error "$prefix.bin.*(truncated|shorter|bytes)" ;;
  token_beyond_vocab)
    prefix=$(corpus)
    run "${small[@]}" --data-path "$prefix" --vocab-size 1000
    expect_error "$prefix.bin: token id [0-9]+ .*outside the vocabulary \\[0, 1000\\)" ;;
  tokenizer_vocab_too_large)
    # A valid dataset with ids < 1000, but the (default GPT-2) tokenizer has 50257.
    /usr/bin/python3 - "$tmp/small" <<'PY'
import struct, sys
docs = [[(d * 37 + t) % 1000 for t in range(200)] for d in range(20)]
with open(sys.argv[1] + ".bin", "wb") as f:
    for d in docs:
        f.write(struct.pack(f"<{len(d)}H", *d))
with open(sys.argv[1] + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<QB", 1, 8) + struct.pack("<QQ", len(docs), len(docs) + 1))
    f.write(struct.pack(f"<{len(docs)}i", *[len(d) for d in docs]))
    f.write(struct.pack(f"<{len(docs)}q", *[2 * 200 * i for i in range(len(docs))]))
    f.write(struct.pack(f"<{len(docs) + 1}q", *range(len(docs) + 1)))
PY
    run "${small[@]}" --data-path "$tmp/small" --vocab-size 1000
    expect_error "--vocab-size 1000 is smaller than the vocabulary of the tokenizer \\(gpt2-bpe, 50257 ids\\)" ;;
  bad_config_key)
    printf 'num-layers = 2\nnum-layerz = 3\n' >"$tmp/bad.toml"
    run "${small[@]}" --config "$tmp/bad.toml"
    expect_error "$tmp/bad.toml:2: unknown key 'num-layerz'" ;;
  non_finite_loss)
    # N(0, 1e38) weights: the largest draws exceed fp32's range (3.4e38) and
    # are stored as inf, so the first step's loss is not finite.
    run "${small[@]}" --init-method-std 1e38
    want_rc=5
    expect_error "step 1: loss is -?(nan|inf).*first non-finite tensor: embedding.word_embeddings.weight \(parameter\)" allow-steps ;;
  freeze_matches_nothing)
    run "${small[@]}" --freeze 'layers.*.attention.*,layers.*.mlpx.*'
    expect_error "--freeze 'layers.\*.mlpx.\*' matches no parameter of this model \(names look like 'layers.0." ;;
  freeze_everything)
    run "${small[@]}" --freeze 'embedding.*,layers.*,final_norm.*'
    expect_error "--freeze '.*' freezes every parameter: nothing would train" ;;
  device_unknown)
    run "${small[@]}" --device tpu
    expect_error "--device tpu: expected cpu, cuda or cuda:N" ;;
  device_cuda_unavailable)
    # Without the CUDA backend in this build, or without a GPU on this machine.
    run "${small[@]}" --device cuda
    expect_error "built without the CUDA backend|no CUDA device is visible" ;;
  tf32_without_cuda)
    run "${small[@]}" --allow-tf32
    expect_error "--allow-tf32 applies to --device cuda only" ;;
  sft_no_assistant)
    printf '%s\n' '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}' \
      '{"messages": [{"role": "user", "content": "Hi"}]}' >"$tmp/chat.jsonl"
    out=$("$claw" preprocess --input "$tmp/chat.jsonl" --output-prefix "$tmp/chat" --sft 2>&1); rc=$?
    expect_error "chat.jsonl:2: a conversation without an assistant turn \(nothing to learn\)"
    [[ ! -e $tmp/chat_sft_document.idx ]] || { echo "FAIL: a dataset was written"; exit 1; } ;;
  sft_unknown_role)
    printf '%s\n' '{"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "b"}]}' >"$tmp/chat.jsonl"
    out=$("$claw" preprocess --input "$tmp/chat.jsonl" --output-prefix "$tmp/chat" --sft 2>&1); rc=$?
    expect_error "chat.jsonl:1: messages\[0\] has the unknown role \"tool\" \(system, user or assistant\)" ;;
  sft_template_not_expressible)
    printf '%s\n' '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}' >"$tmp/chat.jsonl"
    out=$("$claw" preprocess --input "$tmp/chat.jsonl" --output-prefix "$tmp/chat" --sft --chat-template chatml 2>&1); rc=$?
    expect_error "--chat-template chatml: the tokenizer \(gpt2-bpe\) has no token <\|im_start\|> \(it cannot express" ;;
  sft_plain_data)
    run "${small[@]}" --data-path "$(corpus)" --sft
    expect_error "--sft: .*sotu_gpt2_text_document.idx has no loss mask .*claw preprocess --sft" ;;
  finetune_without_load)
    run "${small[@]}" --finetune
    expect_error "--finetune needs --load DIR \(or --load-hf DIR\)" ;;
  load_hf_missing)
    run "${small[@]}" --load-hf "$tmp/nothing"
    expect_error "--load-hf .*/nothing: no .*/nothing/config.json" ;;
  lora_target_unknown)
    run "${small[@]}" --lora-rank 4 --lora-target-modules q_proj,c_attn
    expect_error "--lora-target-modules: 'q_proj' names no linear layer of this GPT-2 model; valid: all-linear, linear_qkv" ;;
  lora_save_unknown)
    run "${small[@]}" --lora-rank 4 --lora-modules-to-save 'embeding.*'
    expect_error "--lora-modules-to-save 'embeding.*' matches no parameter of this model" ;;
  rl_no_prompts)
    rl
    expect_error "claw rl needs --prompt-data FILE" ;;
  rl_bad_prompt_line)
    printf '%s\n' '{"prompt": "Add: 1 + 2", "answer": "3"}' '{"prompt": "Add: 2 + 2", "answer": "four"}' >"$tmp/add.jsonl"
    rl --prompt-data "$tmp/add.jsonl" --task add
    expect_error "add.jsonl:2: the answer \"four\" is no integer, which --task add checks" ;;
  rl_batch_not_groups)
    rl --prompt-data "$(prompts)" --global-batch-size 12 --micro-batch-size 4 --num-generations 8
    expect_error "--global-batch-size 12 must be a multiple of --num-generations 8" ;;
  rl_async_colocated)
    rl --prompt-data "$(prompts)" --async
    expect_error "--async overlaps generation with training on other ranks: give --rollout-workers K" ;;
  rl_prompt_too_long)
    rl --prompt-data "$(prompts)" --seq-length 16 --max-new-tokens 12
    expect_error "prompts.jsonl: prompt 1 has [0-9]+ tokens; with --max-new-tokens 12 it needs --seq-length [0-9]+ or more" ;;
  rl_dropout)
    rl --prompt-data "$(prompts)" --hidden-dropout 0.1
    expect_error "--hidden-dropout 0.1: GRPO compares the learner's log-probabilities with the generator's" ;;
  rl_task_unknown)
    rl --prompt-data "$(prompts)" --task count
    expect_error "--task count: expected one of reverse, sort, add" ;;
  rl_env_url)
    rl --prompt-data "$(prompts)" --env-url 127.0.0.1:8100
    expect_error "--env-url 127.0.0.1:8100: expected http://HOST:PORT" ;;
  rl_env_unreachable)
    # Nothing listens there: every episode fails, counted, and no group is
    # left to learn from; the run says why instead of hanging.
    rl --prompt-data "$(prompts)" --env-url http://127.0.0.1:9 --env-timeout 5 --train-iters 1
    expect_error "every episode of step 1 failed" ;;
  ckpt_convert_overwrite|ckpt_convert_latest_back)
    # claw ckpt never overwrites a checkpoint nor moves `latest` back (a
    # convert onto its own directory once replaced an fp32 + Adam checkpoint).
    run --num-layers 1 --hidden-size 64 --seq-length 32 --micro-batch-size 2 --train-iters 2 --save-interval 1 \
      --save "$tmp/ck" --eval-interval 0 --num-threads 2
    [[ $rc -eq 0 ]] || { printf '%s\n' "$out" | tail -3; fail "training the checkpoint"; }
    before=$(cat "$tmp/ck/iter_0000001/metadata.json")
    if [[ $case_name == ckpt_convert_overwrite ]]; then
      out=$("$claw" ckpt convert --load "$tmp/ck" --ckpt-step 1 --save "$tmp/ck" --dtype bf16 2>&1); rc=$?
      expect_error "--save .*/ck already holds iteration 1 .* never overwrites a checkpoint"
      [[ $(cat "$tmp/ck/iter_0000001/metadata.json") == "$before" ]] || fail "iteration 1 was rewritten"
    else
      "$claw" ckpt convert --load "$tmp/ck" --save "$tmp/c" --dtype bf16 >/dev/null 2>&1 || fail "convert iteration 2"
      out=$("$claw" ckpt convert --load "$tmp/ck" --ckpt-step 1 --save "$tmp/c" --dtype bf16 2>&1); rc=$?
      expect_error "holds iteration 2 as its latest; writing iteration 1 there would move it back"
      [[ $(cat "$tmp/c/latest_checkpointed_iteration.txt") == 2 ]] || fail "latest moved"
    fi ;;
  serve_empty_api_key)
    # An empty key would serve without authentication: refused before the model loads.
    out=$("$claw" serve --model "$tmp/none" --port 0 --api-key "" 2>&1); rc=$?
    expect_error "--api-key is empty: give a key, or leave the flag out" ;;
  dpo_bad_pair)
    printf '%s\n' '{"prompt": "a", "chosen": "b", "rejected": "c"}' '{"prompt": "a", "chosen": "b"}' >"$tmp/pairs.jsonl"
    out=$("$claw" preprocess --input "$tmp/pairs.jsonl" --output-prefix "$tmp/pref" --dpo 2>&1); rc=$?
    expect_error "pairs.jsonl:2: a preference pair needs \"chosen\" and \"rejected\""
    [[ ! -e $tmp/pref_dpo_document.idx ]] || { echo "FAIL: a dataset was written"; exit 1; } ;;
  dpo_odd_micro_batch)
    printf '%s\n' '{"prompt": "a", "chosen": "b", "rejected": "c"}' >"$tmp/pairs.jsonl"
    "$claw" preprocess --input "$tmp/pairs.jsonl" --output-prefix "$tmp/pref" --dpo >/dev/null 2>&1
    run "${small[@]}" --data-path "$tmp/pref_dpo_document" --dpo --micro-batch-size 3
    expect_error "--dpo: --micro-batch-size 3 must be even" ;;
  dpo_on_sft_data)
    printf '%s\n' '{"prompt": "a", "completion": "b"}' >"$tmp/chat.jsonl"
    "$claw" preprocess --input "$tmp/chat.jsonl" --output-prefix "$tmp/chat" --sft >/dev/null 2>&1
    run "${small[@]}" --data-path "$tmp/chat_sft_document" --dpo --split 1,0,0
    expect_error "--dpo: .*chat_sft_document.idx: document 0 has 1 sequences; a DPO dataset \(claw preprocess --dpo\)" ;;
  dpo_loss_type_unknown)
    run "${small[@]}" --dpo --dpo-loss-type kto
    expect_error "--dpo-loss-type 'kto' is not one of sigmoid \(DPO\), ipo, hinge" ;;
  peft_other_base)
    tiny=(--model gpt2-tiny --num-layers 2 --train-iters 1 --eval-interval 0 --micro-batch-size 2 --seq-length 16
          --num-threads 2 --peak-gflops 100)
    "$claw" train "${tiny[@]}" --save "$tmp/base" >/dev/null 2>&1 &&
      "$claw" train "${tiny[@]}" --load "$tmp/base" --finetune --lora-rank 4 --save "$tmp/lora" >/dev/null 2>&1 &&
      "$claw" ckpt export --load "$tmp/lora" --format peft --output "$tmp/adapter" >/dev/null 2>&1 &&
      "$claw" train "${tiny[@]}" --hidden-size 128 --save "$tmp/wide" >/dev/null 2>&1 || { echo "FAIL: setup"; exit 1; }
    out=$("$claw" ckpt import --format peft --input "$tmp/adapter" --load "$tmp/wide" --save "$tmp/imported" 2>&1); rc=$?
    expect_error "adapter/adapter_model.safetensors: 'base_model.model.transformer.h.0.attn.c_attn.lora_A.weight' has shape \[4, 256\], but this base model needs \[4, 128\]: the adapter was made for a model of another shape"
    [[ ! -e $tmp/imported ]] || { echo "FAIL: a checkpoint was written"; exit 1; } ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
