#!/usr/bin/env bash
# The --save directory is checked before step 1 and held by one job:
#   - a directory that cannot be created or written (a path under /proc; a
#     read-only tmpfs where this user may mount one) fails at once with
#     exit 1, naming it, before any step;
#   - a second job given the --save of a running one is refused (exit 1)
#     naming the holder's pid and host, and so is `claw ckpt convert` into
#     it; once the first job ends, the lock is free again.
#   save_dir_checks.sh CLAW_BINARY
set -uo pipefail
claw=$1
tmp=$(mktemp -d)
pid=
trap '[[ -z $pid ]] || kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
        --micro-batch-size 2 --global-batch-size 2 --eval-interval 1000 --eval-iters 1 --lr 2e-3
        --num-threads 1 --peak-gflops 100)

refused_before_step_1() {  # LOG CODE WHAT
  [[ $2 == 1 ]] || { cat "$1"; fail "$3: exit code $2, expected 1"; }
  grep -q "checked before step 1" "$1" || { cat "$1"; fail "$3: no error naming the check"; }
  ! grep -q "step *1/" "$1" || { cat "$1"; fail "$3: a step ran"; }
  echo "ok: $3: $(grep "claw: error" "$1")"
}

"$claw" train "${common[@]}" --train-iters 2 --save /proc/claw-ckpt >"$tmp/proc.log" 2>&1
refused_before_step_1 "$tmp/proc.log" $? "--save under /proc"
if unshare -m true 2>/dev/null; then
  mkdir -p "$tmp/ro"
  unshare -m sh -c 'mount -t tmpfs -o ro,size=1m tmpfs "$1" && shift && exec "$@"' sh "$tmp/ro" \
    "$claw" train "${common[@]}" --train-iters 2 --save "$tmp/ro/ckpt" >"$tmp/ro.log" 2>&1
  refused_before_step_1 "$tmp/ro.log" $? "--save on a read-only tmpfs"
  grep -q "Read-only file system" "$tmp/ro.log" || { cat "$tmp/ro.log"; fail "the reason is not named"; }
fi

# The lock: a long run holds $tmp/ckpt; a second is refused naming it, and
# so is `claw ckpt convert` writing there.
"$claw" train "${common[@]}" --train-iters 2 --save "$tmp/src" >"$tmp/src.log" 2>&1 || { cat "$tmp/src.log"; fail "src"; }
"$claw" train "${common[@]}" --train-iters 100000 --save "$tmp/ckpt" --save-interval 100000 \
  --metrics-file "$tmp/first.jsonl" >"$tmp/first.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [[ -s $tmp/first.jsonl ]] && break
  sleep 0.1
done
[[ -s $tmp/first.jsonl ]] || { cat "$tmp/first.log"; fail "the first run did not start"; }
"$claw" train "${common[@]}" --train-iters 2 --save "$tmp/ckpt" >"$tmp/second.log" 2>&1
code=$?
[[ $code == 1 ]] || { cat "$tmp/second.log"; fail "the second job: exit code $code, expected 1"; }
grep -q "another job is saving checkpoints there (held by pid $pid on host " "$tmp/second.log" ||
  { cat "$tmp/second.log"; fail "the refusal does not name pid $pid"; }
echo "ok: $(grep "claw: error" "$tmp/second.log")"
"$claw" ckpt convert --load "$tmp/src" --save "$tmp/ckpt" --dtype bf16 >"$tmp/convert.log" 2>&1
code=$?
[[ $code == 1 ]] || { cat "$tmp/convert.log"; fail "ckpt convert onto a held --save: exit code $code, expected 1"; }
grep -q "another job is saving checkpoints there (held by pid $pid on host " "$tmp/convert.log" ||
  { cat "$tmp/convert.log"; fail "ckpt convert: the refusal does not name pid $pid"; }
[[ ! -e $tmp/ckpt/iter_0000002 ]] || fail "ckpt convert wrote into the held directory"
echo "ok: ckpt convert: $(grep "claw: error" "$tmp/convert.log")"
kill -TERM "$pid"
wait "$pid"
pid=
"$claw" train "${common[@]}" --train-iters 2 --save "$tmp/ckpt2" --load "$tmp/ckpt" >/dev/null 2>&1 ||
  fail "loading the first run's checkpoint"
"$claw" train "${common[@]}" --train-iters 2 --save "$tmp/ckpt" >"$tmp/third.log" 2>&1 ||
  { cat "$tmp/third.log"; fail "the lock was not released when its job ended"; }
echo "PASS"
