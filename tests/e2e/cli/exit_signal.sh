#!/usr/bin/env bash
# SIGTERM or SIGUSR1 stops a training run cleanly (Megatron's exit-signal
# handler, for Slurm preemption): every rank finishes its step, the run
# saves that iteration and exits with code 6 ("stopped"); resumed with
# --load, it continues bitwise.
#   exit_signal.sh CLAW_BINARY [mpi]
#     mpi: the same with 2 ranks (DP 2, ZeRO-1) under mpirun, the signal
#          (SIGUSR1) sent to mpirun, which forwards it to the ranks.
set -uo pipefail
claw=$1
mode=${2:-single}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
pid=
trap '[[ -z $pid ]] || kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
        --micro-batch-size 2 --global-batch-size 4 --train-iters 40 --lr-decay-iters 40 --eval-interval 1000
        --eval-iters 1 --lr 2e-3 --lr-warmup-iters 2 --num-threads 1 --peak-gflops 100 --log-interval 1)
launch=("$claw")
signal=TERM
if [[ $mode == mpi ]]; then
  launch=(mpirun --oversubscribe --bind-to none -np 2 "$claw")
  common+=(--use-distributed-optimizer)
  signal=USR1
fi

"${launch[@]}" train "${common[@]}" --metrics-file "$tmp/full.jsonl" >"$tmp/full.log" 2>&1 ||
  { cat "$tmp/full.log"; fail "the uninterrupted run"; }

# The run to stop: signalled once it has logged 5 steps.
"${launch[@]}" train "${common[@]}" --save "$tmp/ckpt" --save-interval 1000 --metrics-file "$tmp/first.jsonl" \
  >"$tmp/first.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [[ -f $tmp/first.jsonl && $(wc -l <"$tmp/first.jsonl") -ge 5 ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -"$signal" "$pid" || fail "the run ended before the signal"
wait "$pid"
code=$?
pid=
[[ $code == 6 ]] || { cat "$tmp/first.log"; fail "exit code $code after SIG$signal, expected 6 (stopped)"; }
grep -q "SIG$signal received: stopping after step" "$tmp/first.log" || { cat "$tmp/first.log"; fail "no stop message"; }
grep -q "stopped by SIG$signal after step .*; resume with --load" "$tmp/first.log" ||
  { cat "$tmp/first.log"; fail "no resume hint"; }
stopped=$(tail -n 1 "$tmp/first.jsonl" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])')
[[ $stopped -ge 5 && $stopped -lt 40 ]] || fail "stopped at step $stopped"
[[ $(cat "$tmp/ckpt/latest_checkpointed_iteration.txt") == "$stopped" ]] ||
  { ls "$tmp/ckpt"; fail "the checkpoint is not iteration $stopped"; }
echo "ok: SIG$signal after step 5 stopped the run at step $stopped with exit code 6, saved"

"${launch[@]}" train "${common[@]}" --load "$tmp/ckpt" --metrics-file "$tmp/resumed.jsonl" >"$tmp/resumed.log" 2>&1 ||
  { cat "$tmp/resumed.log"; fail "the resumed run"; }
/usr/bin/python3 "$here/resumed_equal.py" "$tmp/full.jsonl" "$tmp/resumed.jsonl" $((stopped + 1)) 40 ||
  fail "the resumed run differs"

echo "PASS"
