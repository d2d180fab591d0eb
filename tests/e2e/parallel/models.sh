# Sourced by the train_*.sh tests and references.sh: the small models the
# parity tests train, and their flags in one place, so that a single-rank run
# two scripts compare against is one reference (compare_runs.sh: reference).
# Every run is scheduled for 20 steps: a layout's shortened run stops after
# $short of them (--exit-interval) on the same learning-rate schedule and is
# compared with the reference's first steps; one run per parallelism kind
# goes the whole way. Validation every 4 steps, so a shortened run has one.
#
# The runs train on the built-in corpus in bytes (byte_tokenizer.py: 256 ids
# and <|endoftext|>), made once per suite under $CLAW_TEST_REFS (else in
# $tmp): GPT-2's 50,257-column output layer would be 95% of these models'
# steps, and parity does not depend on the vocabulary's width (the
# vocabulary-parallel layers split 384 padded columns as they split 50,304).
# The SFT and DPO cases keep GPT-2's ids (mpi_common_gpt2: task_data).
byte_corpus() {
  local dir=${CLAW_TEST_REFS:-$tmp}/bytes
  mkdir -p "$dir" || return 1
  (
    flock 9
    if [[ ! -f $dir/done ]]; then
      /usr/bin/python3 "$here/byte_tokenizer.py" "$dir/tokenizer.json" &&
        "$claw" preprocess --input "${CLAW_DATA_DIR:?}/sotu.jsonl" --output-prefix "$dir/sotu" --append-eod \
          --tokenizer-type HFTokenizer --tokenizer-model "$dir/tokenizer.json" --workers 1 >"$dir/preprocess.log" 2>&1 ||
        { cat "$dir/preprocess.log"; exit 1; }
      touch "$dir/done"
    fi
  ) 9>"$dir.lock" || fail "the byte-level corpus (byte_tokenizer.py, claw preprocess)"
  byte_corpus_data=(--data-path "$dir/sotu_text_document" --tokenizer-type HFTokenizer
                    --tokenizer-model "$dir/tokenizer.json")
  byte_data=("${byte_corpus_data[@]}" --vocab-size 257)
}
byte_corpus
mpi_common_gpt2=(--num-layers 2 --hidden-size 64 --seq-length 32 --micro-batch-size 1 --global-batch-size 8
                 --train-iters 20 --eval-interval 4 --eval-iters 2 --lr 2e-3 --lr-warmup-iters 3 --peak-gflops 100
                 --num-threads 1)
mpi_common=("${mpi_common_gpt2[@]}" "${byte_data[@]}")
short=4
gpt=(--model gpt2-tiny --num-attention-heads 4 --hidden-dropout 0.1)
# Dropout masks are drawn per token of the run's stream; a CP rank's tokens
# are not a contiguous part of it, so context-parallel runs train without.
gpt_nodrop=(--model gpt2-tiny --num-attention-heads 4 --hidden-dropout 0)
llama=(--model llama-tiny --num-attention-heads 8 --num-query-groups 2 --ffn-hidden-size 192)
# Routing is a top-k: a token whose k-th and (k+1)-th scores differ by a
# rounding error would take another expert on another layout; small models
# at this learning rate keep every token clear of such ties for 20 steps.
mixtral=(--model mixtral-tiny --num-attention-heads 4 --ffn-hidden-size 128 --num-query-groups 2)
deepseek=(--model deepseek-tiny --num-attention-heads 4 --ffn-hidden-size 128 --num-query-groups 4 --moe-layer-freq 0,1
          --moe-ffn-hidden-size 32 --moe-shared-expert-intermediate-size 32)

# task_data sft|dpo: the prefix of `claw preprocess --sft|--dpo` output of
# scripts/sft_task.py's conversations (400; --preference pairs for dpo),
# made once per suite under $CLAW_TEST_REFS (else in $tmp). Prints the prefix.
task_data() {
  local kind=$1 dir=${CLAW_TEST_REFS:-$tmp}/task_$1
  (
    flock 9
    if [[ ! -f $dir/done ]]; then
      rm -rf "$dir" && mkdir -p "$dir"
      # shellcheck disable=SC2046
      /usr/bin/python3 "$here/../../../scripts/sft_task.py" --train 400 --test 10 --out "$dir/task" \
        $([[ $kind == dpo ]] && echo --preference) >/dev/null || exit 1
      "$claw" preprocess --input "$dir/task/train.jsonl" --output-prefix "$dir/chat" --"$kind" --workers 1 \
        >"$dir/preprocess.log" 2>&1 || { cat "$dir/preprocess.log"; exit 1; }
      touch "$dir/done"
    fi
  ) 9>"${dir}.lock" || fail "the $kind data (scripts/sft_task.py, claw preprocess --$kind)"
  echo "$dir/chat_${kind}_document"
}

# The architecture options of the families claw imports, on llama-tiny's
# shape: Qwen 2's q/k/v biases and Mistral's sliding window (8 keys of the
# 32-token rows; the CP 2 chunks are 8 tokens, so windows cross them).
qwen2=("${llama[@]}" --add-qkv-bias)
mistral=("${llama[@]}" --window-size 8)
# Qwen 3's per-head q/k norms with a head dimension of its own (32 on a width of 64).
qwen3=("${llama[@]}" --qk-layernorm --kv-channels 32)
# Qwen3-MoE: Qwen 3's attention over mixtral-tiny's experts, the first layer dense.
qwen3moe=("${mixtral[@]}" --qk-layernorm --kv-channels 32 --moe-layer-freq 0,1)
# Gemma 2's layers: Gemma 3's without the q/k norms and the second RoPE base,
# with soft-caps low enough to bend this model's scores (1) and logits (2).
gemma2=("${llama[@]}" --geglu --apply-layernorm-1p --post-sublayer-norm --scale-embedding --kv-channels 32
        --softmax-scale 0.2 --window-size 8 --window-attn-skip-freq 2 --attn-logit-softcapping 1
        --final-logit-softcapping 2)
# OLMo 2's layers: norms after each sublayer and none before, q/k norms over
# all heads' width (at TP 4 the 2 KV groups' norm columns each on 2 ranks).
olmo2=("${llama[@]}" --qk-layernorm --qk-layernorm-full-width --post-sublayer-norm --no-pre-sublayer-norm)
# Gemma 3's layers: GeGLU, (1 + w) norms before and after each sublayer, q/k
# norms, scaled embeddings and scores, layer 0 windowed (8 keys, its own RoPE
# base) and layer 1 global.
gemma3=("${llama[@]}" --geglu --apply-layernorm-1p --post-sublayer-norm --scale-embedding --qk-layernorm
        --kv-channels 32 --softmax-scale 0.2 --window-size 8 --window-attn-skip-freq 2 --local-rotary-base 10000
        --rotary-base 1000000)
# DeepSeek-V3's attention and router on deepseek-tiny's MoE: multi-head
# latent attention (queries through a rank-24 latent, keys and values from a
# rank-16 one, heads of 16 + 8 interleaved rotated dimensions, values of
# 12) and group-limited routing (4 groups of 4 experts, 2 kept, weights x 2.5).
deepseek3=("${deepseek[@]}" --multi-latent-attention --q-lora-rank 24 --kv-lora-rank 16 --qk-head-dim 16
           --qk-pos-emb-head-dim 8 --v-head-dim 12 --rotary-interleaved --moe-router-num-groups 4
           --moe-router-group-topk 2 --moe-router-topk-scaling-factor 2.5)
