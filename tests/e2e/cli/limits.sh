#!/usr/bin/env bash
# Limits: a memory plan larger than the machine, absurd shapes, malformed
# checkpoint metadata and out-of-range planner flags are each refused with
# exit code 1 and ONE error line `claw: error: ...` naming the input, before
# any allocation or training step. (`claw train` also logs its resolved config
# to stderr before the check; those log lines aside, the error is the only
# line.) Out of memory and unbounded lines of `claw tokenize`:
# tests/e2e/tokenizer/tokenize_cli.sh.
#   limits.sh CLAW_BINARY CASE
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2

run() {  # run COMMAND ARGS...: sets err (stderr without train's log lines) and rc; stdout to $tmp/stdout
  "$claw" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  rc=$?
  err=$(grep -v -e '^\[claw' -e '^  ' -e '^$' "$tmp/stderr")
}
expect_error() {  # expect_error PATTERN: exit 1, one error line matching PATTERN, no training step
  [[ $rc -eq 1 ]] || { cat "$tmp/stderr" | tail -5; fail "exit code $rc (expected 1)"; }
  [[ $(wc -l <<<"$err") -eq 1 && $err == "claw: error: "* ]] || fail "not a one-line error: $err"
  grep -qE -- "$1" <<<"$err" || fail "error does not match /$1/: $err"
  grep -q "step 1/" "$tmp/stderr" && fail "training started"
  echo "ok: $err"
}

# A one-rank checkpoint of a small model (2 steps), and a copy whose
# metadata.json has the value `json` at `path` (a Python subscript string).
small=(--model gpt2-tiny --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1
       --global-batch-size 2 --eval-interval 0 --num-threads 1)
checkpoint_with() {  # checkpoint_with SUBSCRIPT JSON_VALUE
  if [[ ! -d $tmp/ck ]]; then
    "$claw" train "${small[@]}" --train-iters 2 --save "$tmp/ck" >"$tmp/save.log" 2>&1 ||
      { tail -5 "$tmp/save.log"; fail "saving a checkpoint"; }
    cp "$tmp/ck/iter_0000002/metadata.json" "$tmp/metadata.good.json"
  fi
  /usr/bin/python3 - "$tmp/metadata.good.json" "$tmp/ck/iter_0000002/metadata.json" "$1" "$2" <<'PY' ||
import json, sys
good, path, subscript, value = sys.argv[1:]
with open(good) as f:
    meta = json.load(f)
exec(f"meta{subscript} = json.loads(value)")
with open(path, "w") as f:
    json.dump(meta, f)
PY
    fail "corrupting the metadata"
}

case $case_name in
  memory_plan)  # a shape no machine holds on one rank: refused before allocating, naming plan, limit and fixes
    run train --model llama3-405b --train-iters 1
    expect_error "the memory plan needs [0-9.]+ TiB on this node \(1 rank; this one: params [0-9.]+ \+ grads [0-9.]+ \+ optimizer [0-9.]+ \+ activations [0-9.]+ \+ runtime [0-9.]+ GiB; \+ 3% margin\), more than the [0-9.]+ [KMGT]iB available \((MemAvailable in /proc/meminfo|cgroup v[12] |ulimit -v).*; fewer --num-layers.*--recompute-granularity full.*--zero-stage 3" ;;
  memory_plan_ulimit)  # the limit of ulimit -v counts, and is named
    (ulimit -v 3000000; exec "$claw" train --model llama3-8b --num-layers 1 --seq-length 64 --train-iters 1 \
      >"$tmp/stdout" 2>"$tmp/stderr")
    rc=$?
    err=$(grep -v -e '^\[claw' -e '^  ' -e '^$' "$tmp/stderr")
    expect_error "the memory plan needs [0-9.]+ GiB on this node .*, more than the [0-9.]+ [KMG]iB available \((ulimit -v 2.86 GiB \(RLIMIT_AS\), [0-9.]+ [KMG]iB of it already mapped by this process|MemAvailable in /proc/meminfo|cgroup v[12] .*)\)" ;;
  num_layers_train)  # absurd --num-layers: one line, not a planner that runs out of memory
    run train --num-layers 1000000000
    expect_error "--num-layers 1000000000 is too large: at most 10000" ;;
  num_layers_plan)
    run plan --model llama3-8b --num-layers 1000000000 --num-gpus 8 --global-batch-size 8
    expect_error "--num-layers 1000000000 is too large: at most 10000" ;;
  plan_seq_length)  # 0 and negatives are refused, not planned at the model's length
    run plan --model gpt2-124m --num-gpus 8 --global-batch-size 8 --seq-length 0
    expect_error "--seq-length must be positive \(tokens per sequence\), got 0"
    run plan --model gpt2-124m --num-gpus 8 --global-batch-size 8 --seq-length -4
    expect_error "--seq-length must be positive \(tokens per sequence\), got -4" ;;
  plan_top)
    run plan --model gpt2-124m --num-gpus 8 --global-batch-size 8 --top 0
    expect_error "--top must be positive \(the number of layouts to print\), got 0"
    [[ ! -s $tmp/stdout ]] || fail "claw plan printed a plan: $(head -2 "$tmp/stdout")" ;;
  ckpt_metadata_inspect)  # a value of the wrong type, named by its JSON path
    checkpoint_with '["state"]["layout"]["dp"]' '{}'
    run ckpt inspect --verify "$tmp/ck"
    expect_error "iter_0000002/metadata.json: state.layout.dp: expected an integer in \[1, [0-9]+\], got an object"
    checkpoint_with '["chunks"][3]["sizes"][0]' '1.5'
    run ckpt inspect --verify "$tmp/ck"
    expect_error "iter_0000002/metadata.json: chunks\[3\].sizes\[0\]: expected an integer in \[0, [0-9]+\], got 1.5" ;;
  ckpt_metadata_load)  # train --load gets the same validation (it read state fields unchecked)
    checkpoint_with '["state"]["layout"]["dp"]' '{}'
    run train "${small[@]}" --train-iters 4 --load "$tmp/ck"
    expect_error "iter_0000002/metadata.json: state.layout.dp: expected an integer in \[1, [0-9]+\], got an object"
    checkpoint_with '["state"]["consumed_train_samples"]' '-8'
    run train "${small[@]}" --train-iters 4 --load "$tmp/ck"
    expect_error "iter_0000002/metadata.json: state.consumed_train_samples: expected an integer >= 0, got -8" ;;
  *)
    fail "unknown case $case_name" ;;
esac
