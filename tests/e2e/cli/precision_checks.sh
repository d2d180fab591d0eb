# Checks shared by the optimizer-precision tests (precision_aware_optimizer.sh,
# fp16_main_params.sh); sourced after they set claw, tmp, fail and common.

# optimizer_mib LOG: the memory plan's optimizer row, in MiB.
optimizer_mib() { sed -n 's/^ *optimizer *\([0-9.]*\) MiB.*/\1/p' "$1" | head -n 1; }

# close_but_different A.jsonl B.jsonl WHAT: the run B (a lower precision)
# differs from A somewhere yet ends within 1% of A's final loss.
close_but_different() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
la, lb = a[-1]["loss"], b[-1]["loss"]
print(f"final loss after {len(a)} steps: reference {la:.6f}, {sys.argv[3]} {lb:.6f}")
assert any(x["loss"] != y["loss"] for x, y in zip(a, b)), f"{sys.argv[3]} changed nothing: really lower precision?"
assert abs(lb - la) <= 0.01 * la, (la, lb)
PY
}

# resumes_bitwise WHAT FLAG...: 6 steps with FLAGs, and the same saved after
# step 3 ($tmp/ckpt) and resumed; steps 4-6 must equal the uninterrupted run's.
resumes_bitwise() {
  local what=$1
  shift
  "$claw" train "${common[@]}" "$@" --train-iters 6 --lr-decay-iters 6 --metrics-file "$tmp/full.jsonl" \
    >"$tmp/full.log" 2>&1 || { cat "$tmp/full.log"; fail "$what: 6 steps"; }
  "$claw" train "${common[@]}" "$@" --train-iters 6 --lr-decay-iters 6 --save "$tmp/ckpt" --save-interval 3 \
    --exit-interval 3 >"$tmp/first.log" 2>&1 || { cat "$tmp/first.log"; fail "$what: the run saved at step 3"; }
  "$claw" train "${common[@]}" "$@" --train-iters 6 --lr-decay-iters 6 --load "$tmp/ckpt" \
    --metrics-file "$tmp/resumed.jsonl" >"$tmp/resumed.log" 2>&1 || { cat "$tmp/resumed.log"; fail "$what: resumed"; }
  /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/resumed_equal.py" "$tmp/full.jsonl" "$tmp/resumed.jsonl" 4 6 ||
    fail "the run resumed from $what"
  "$claw" ckpt inspect --tensors "$tmp/ckpt" >"$tmp/inspect.txt" 2>&1 || { cat "$tmp/inspect.txt"; fail "inspect"; }
}

# loads_across WHAT FLAG...: $tmp/ckpt (saved with FLAGs) loads into an fp32
# run, and an fp32 checkpoint loads into a run with FLAGs.
loads_across() {
  local what=$1
  shift
  "$claw" train "${common[@]}" --train-iters 6 --lr-decay-iters 6 --load "$tmp/ckpt" >"$tmp/widen.log" 2>&1 ||
    { cat "$tmp/widen.log"; fail "$what into fp32"; }
  "$claw" train "${common[@]}" --train-iters 4 --lr-decay-iters 6 --save "$tmp/f32ckpt" --save-interval 3 \
    --exit-interval 3 >"$tmp/f32first.log" 2>&1 || { cat "$tmp/f32first.log"; fail "fp32 save"; }
  "$claw" train "${common[@]}" "$@" --train-iters 6 --lr-decay-iters 6 --load "$tmp/f32ckpt" >"$tmp/narrow.log" 2>&1 ||
    { cat "$tmp/narrow.log"; fail "fp32 into $what"; }
}
