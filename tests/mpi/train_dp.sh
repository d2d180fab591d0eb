#!/usr/bin/env bash
# `claw train` under mpirun: the launch path end to end.
#
#   train_dp.sh CLAW_BINARY CASE
#
# parity     20 steps on the built-in corpus, single rank vs mpirun -np 2
#            (ZeRO 0 and 2) and -np 4 (ZeRO 1, and 3 with both overlaps):
#            the same per-step losses, grad norms and validation losses
#            (relative 2e-5), the metrics written once (rank 0), with the
#            per-rank step-time spread.
# bad_layout --tensor-model-parallel-size 3 on 4 ranks is refused before any
#            work, naming the flag; the job ends at once with exit code 1
#            (bad configuration).
# bad_flag   a mistyped flag under mpirun: exit code 2 (usage), not the
#            retryable code of a hang.
# kill_rank  one rank SIGKILLed mid-run: the job ends within seconds and the
#            launcher's message names the lost rank.
# hang       one rank never joins a collective (the hidden flag --test-fault
#            hang:RANK:GROUP:SEQ, an injector passed to the World): the others
#            time out after --distributed-timeout-minutes and print their
#            flight records; the job ends with exit code 4 (communication
#            failure or timeout: retryable), which a supervisor can tell from
#            a bad flag (2) or configuration (1).
set -uo pipefail
claw=$1
case_name=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none)
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
        --micro-batch-size 1 --global-batch-size 8 --train-iters 20 --eval-interval 10 --eval-iters 2
        --lr 2e-3 --lr-warmup-iters 3 --hidden-dropout 0.1 --peak-gflops 100 --num-threads 1)
fail() { echo "FAIL: $*"; exit 1; }

case $case_name in
parity)
  "$claw" train "${common[@]}" --metrics-file "$tmp/single.jsonl" >"$tmp/single.log" 2>&1 ||
    { cat "$tmp/single.log"; fail "single-rank run"; }
  for run in "2 --zero-stage 0" "2 --zero-stage 2" "4 --use-distributed-optimizer --ddp-bucket-size 20000" \
             "4 --zero-stage 3 --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 20000"; do
    read -r np flags <<<"$run"
    name="np${np}_$(echo "$flags" | tr -cd 'a-z0-9')"
    # shellcheck disable=SC2086
    timeout 300 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" $flags --metrics-file "$tmp/$name.jsonl" \
      >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "mpirun -np $np claw train $flags"; }
    grep -q "data-parallel" "$tmp/$name.log" || fail "$name: no layout line"
    /usr/bin/python3 "$(dirname "$0")/compare_metrics.py" "$tmp/single.jsonl" "$tmp/$name.jsonl" "$name" || exit 1
  done ;;
bad_layout)
  start=$(date +%s.%N)
  timeout 120 "${mpirun[@]}" -np 4 "$claw" train "${common[@]}" --tensor-model-parallel-size 3 >"$tmp/log" 2>&1
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  cat "$tmp/log" | grep -v "^$" | head -5
  [[ $rc -eq 1 ]] || fail "exit $rc, expected 1 (bad configuration)"
  grep -q -- "--tensor-model-parallel-size 3" "$tmp/log" || fail "the error does not name --tensor-model-parallel-size 3"
  grep -q "step 1/" "$tmp/log" && fail "training started"
  echo "ok: refused in ${secs}s, exit $rc" ;;
bad_flag)
  timeout 120 "${mpirun[@]}" -np 2 "$claw" train "${common[@]}" --num-layer 3 >"$tmp/log" 2>&1
  rc=$?
  cat "$tmp/log" | grep -v "^$" | head -5
  [[ $rc -eq 2 ]] || fail "exit $rc, expected 2 (usage)"
  grep -q "unknown flag --num-layer" "$tmp/log" || fail "the error does not name --num-layer"
  echo "ok: exit $rc" ;;
kill_rank)
  timeout 120 "${mpirun[@]}" -np 4 "$claw" train "${common[@]}" --train-iters 100000 --eval-interval 0 \
    --log-interval 1 >"$tmp/log" 2>&1 &
  launcher=$!
  for _ in $(seq 600); do grep -qE "step +3/" "$tmp/log" && break; sleep 0.1; done
  grep -qE "step +3/" "$tmp/log" || { cat "$tmp/log"; fail "training did not start"; }
  runner=$(pgrep -P "$launcher" mpirun | head -1)
  victim=$(pgrep -P "$runner" | sed -n 2p)
  [[ -n $victim ]] || fail "no rank process found under mpirun"
  victim_rank=$(tr '\0' '\n' <"/proc/$victim/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
  start=$(date +%s.%N)
  kill -9 "$victim"
  wait "$launcher"
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  grep -E "process rank $victim_rank .*exited on signal 9" "$tmp/log" ||
    { cat "$tmp/log"; fail "no message names the killed rank $victim_rank"; }
  [[ $rc -ne 0 && $rc -ne 124 ]] || fail "exit $rc (124: the job hung until timeout)"
  echo "ok: job ended ${secs}s after SIGKILL of rank $victim_rank (PID $victim), exit $rc" ;;
hang)
  start=$(date +%s.%N)
  timeout 120 "${mpirun[@]}" -np 3 "$claw" train --test-fault hang:1:dp:12 \
    "${common[@]}" --global-batch-size 6 --eval-interval 0 --distributed-timeout-minutes 0.1 >"$tmp/log" 2>&1
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  grep -E "did not complete|flight record|seq +12 " "$tmp/log" | head -12
  [[ $rc -ne 124 ]] || fail "exit $rc: the job hung until the test's timeout"
  [[ $rc -eq 4 ]] || { cat "$tmp/log"; fail "exit $rc, expected 4 (communication failure or timeout)"; }
  grep -q "did not complete within 6.0 s" "$tmp/log" || { cat "$tmp/log"; fail "no timeout error"; }
  grep -q "test fault hang:1:dp:12: this rank never joins all_reduce #12 on group dp" "$tmp/log" ||
    fail "the hung rank did not log the injected fault"
  grep -q "flight record" "$tmp/log" || fail "no flight record"
  grep -qE "group dp +all_reduce +seq +12 .*(RUNNING|QUEUED)" "$tmp/log" || fail "the flight record does not show dp seq 12 pending"
  echo "ok: job ended after ${secs}s, exit $rc" ;;
*) fail "unknown case $case_name" ;;
esac
