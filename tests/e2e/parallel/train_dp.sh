#!/usr/bin/env bash
# `claw train` under mpirun: the launch path end to end.
#
#   train_dp.sh CLAW_BINARY CASE
#
# parity     the single-rank run (models.sh: gpt) against -np 4 with ZeRO-3
#            and both overlaps (20 steps), -np 2 with ZeRO-2 and -np 4 with
#            ZeRO-1 in small buckets (4 steps each): the same per-step losses,
#            grad norms and validation losses (relative 2e-5), the metrics
#            written once (rank 0), with the per-rank step-time spread. The
#            stages' other combinations are test_data_parallel's (gtest).
# mutation   one gradient bucket left unreduced at step 2 (--test-fault
#            skip-grad-reduce:2) under ZeRO-1 on 4 ranks: the 4-step
#            comparison must fail.
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
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2
# shellcheck source=models.sh
source "$here/models.sh"
# shellcheck source=compare_runs.sh
source "$here/compare_runs.sh"
common=("${mpi_common[@]}" "${gpt[@]}")
check_layout() { grep -q "data-parallel" "$1"; }
loss_rtol=2e-5

case $case_name in
parity)
  compare gpt -- "4 --zero-stage 3 --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 20000" \
    "2:$short --zero-stage 2" "4:$short --use-distributed-optimizer --ddp-bucket-size 20000" ;;
mutation)
  caught gpt skip-grad-reduce:2 -- "4:$short --use-distributed-optimizer --ddp-bucket-size 20000" ;;
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
