#!/usr/bin/env bash
# `claw launch`: the supervisor restarts a failed 4-rank TP2 x DP2 job from
# its last checkpoint and the job ends where the uninterrupted run ends.
#   launch.sh CLAW_BINARY MODE
#     kill    kill -9 of a random rank at a random step (asynchronous saves
#             every 10 steps): one restart, the final metrics bitwise equal
#             to the uninterrupted run's, at most 10 steps lost, the time to
#             resume logged
#     stop    kill -STOP of a random rank: the other ranks' hang detection
#             fires within twice the learned timeout, the job is restarted
#             and completes bitwise
#     config  a mistyped flag: exit code 2 and no restart
#     relaunch  kill -9 of a rank, then of the next attempt's mpirun before its
#             first step: that failure names the launcher, and the third
#             attempt's lost steps count from the furthest step any attempt
#             reached
#     orphan  heartbeats without the job's token refused (a forged hang report
#             restarts nothing); kill -9 of the supervisor itself: no rank is
#             left running
set -uo pipefail
claw=$1
mode=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/claw_launch.XXXXXX)
sup=
cleanup() {
  [[ -z $sup ]] || kill -9 "$sup" 2>/dev/null
  pkill -9 -f "$tmp/" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [[ -f $tmp/launch.log ]] && tail -n 40 "$tmp/launch.log"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
iters=60
job=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
     --micro-batch-size 2 --global-batch-size 4 --train-iters $iters --lr-decay-iters $iters --eval-interval 1000
     --eval-iters 1 --lr 2e-3 --lr-warmup-iters 2 --num-threads 1 --peak-gflops 100 --log-interval 10
     --tensor-model-parallel-size 2)
launch=("$claw" launch --nproc 4 --launcher-args "--oversubscribe --bind-to none" --events-file "$tmp/events.jsonl")
steps_done() { [[ -f $tmp/metrics.jsonl ]] && wc -l <"$tmp/metrics.jsonl" || echo 0; }
event() {  # event NAME FIELD: FIELD of the last event NAME
  /usr/bin/python3 -c 'import json,sys
e=[r for r in map(json.loads, open(sys.argv[1])) if r["event"]==sys.argv[2]]
print(e[-1][sys.argv[3]] if e else "")' "$tmp/events.jsonl" "$1" "$2"
}
# The ranks of the running attempt: the children of its mpirun.
ranks() { pgrep -P "$(pgrep -f "^mpirun .*$tmp/" | head -n 1)" 2>/dev/null; }
start_supervised() {
  "${launch[@]}" "$@" -- train "${job[@]}" --save "$tmp/ckpt" --save-interval 10 --async-save \
    --metrics-file "$tmp/metrics.jsonl" >"$tmp/launch.log" 2>&1 &
  sup=$!
}
wait_for_step() {
  for _ in $(seq 1200); do
    [[ $(steps_done) -ge $1 ]] && return 0
    kill -0 "$sup" 2>/dev/null || fail "the supervised job ended before step $1"
    sleep 0.1
  done
  fail "no step $1 within 120 s"
}
finish_and_compare() {
  wait "$sup"
  local code=$?
  sup=
  [[ $code == 0 ]] || fail "claw launch exited $code"
  grep -q "launch: the job completed after 1 restart(s)" "$tmp/launch.log" || fail "no completion after one restart"
  local from lost t
  from=$(event resumed from_iteration)
  lost=$(event resumed lost_steps)
  t=$(event resumed time_to_resume_s)
  [[ -n $from ]] || fail "no resumed event"
  [[ $lost -le 10 ]] || fail "$lost steps lost, more than the checkpoint interval 10"
  grep -q "launch: resumed: step $((from + 1)) ran .* after the failure was detected" "$tmp/launch.log" ||
    fail "the time to resume is not logged"
  mpirun --oversubscribe --bind-to none -np 4 "$claw" train "${job[@]}" --metrics-file "$tmp/full.jsonl" \
    >"$tmp/full.log" 2>&1 || { cat "$tmp/full.log"; fail "the uninterrupted run"; }
  /usr/bin/python3 "$here/../cli/resumed_equal.py" "$tmp/full.jsonl" "$tmp/metrics.jsonl" $((from + 1)) $iters ||
    fail "the restarted job differs from the uninterrupted run"
  echo "ok: resumed from iteration $from, $lost step(s) lost, first step ${t} s after the failure was detected"
}

case $mode in
kill)
  at=$((12 + RANDOM % 30))
  start_supervised
  wait_for_step "$at"
  mapfile -t pids < <(ranks)
  [[ ${#pids[@]} == 4 ]] || fail "found ${#pids[@]} ranks, expected 4"
  victim=${pids[RANDOM % 4]}
  kill -9 "$victim"
  echo "killed pid $victim after step $at"
  finish_and_compare
  [[ $(event failure reason) == *"killed by signal 9"* ]] || fail "the failure is not a killed rank: $(event failure reason)"
  ;;
stop)
  # A 3 s floor keeps the test short; the timeout in force is in the report.
  job+=(--hang-timeout-min 3)
  at=$((12 + RANDOM % 30))
  start_supervised
  wait_for_step "$at"
  mapfile -t pids < <(ranks)
  [[ ${#pids[@]} == 4 ]] || fail "found ${#pids[@]} ranks, expected 4"
  victim=${pids[RANDOM % 4]}
  t0=$(date +%s.%N)
  kill -STOP "$victim"
  echo "stopped pid $victim after step $at"
  for _ in $(seq 600); do
    [[ -n $(event failure reason) ]] && break
    sleep 0.1
  done
  detected=$(event failure time)
  [[ -n $detected ]] || fail "the stopped rank was not detected within 60 s"
  reason=$(event failure reason)
  [[ $reason == *"reported a hang"* && $reason == *"no heartbeat from"*"pid $victim"* ]] ||
    fail "the failure does not name the stopped rank (pid $victim): $reason"
  timeout=$(grep -o "hang \[rank .*over its timeout of [0-9.]* s" "$tmp/launch.log" | head -n 1 |
            sed 's/.*over its timeout of \([0-9.]*\) s/\1/')
  [[ -n $timeout ]] || fail "no hang report with its timeout"
  grep -q "^flight record: last" "$tmp/launch.log" || fail "the hang report has no flight record"
  /usr/bin/python3 -c "import sys; d=$detected-$t0; print(f'detected {d:.1f} s after SIGSTOP; learned timeout $timeout s'); sys.exit(d > 2*$timeout)" ||
    fail "detection took longer than twice the timeout"
  finish_and_compare
  ;;
config)
  "${launch[@]}" -- train "${job[@]}" --save "$tmp/ckpt" --num-layer 3 >"$tmp/launch.log" 2>&1
  code=$?
  [[ $code == 2 ]] || fail "exit code $code for a mistyped flag, expected 2"
  [[ $(grep -c '"event": *"start"\|"event":"start"' "$tmp/events.jsonl") == 1 ]] || fail "the job was started again"
  grep -q "unknown flag --num-layer" "$tmp/launch.log" || fail "the flag is not named"
  grep -q "not restarted" "$tmp/launch.log" || fail "the supervisor does not say it does not restart"
  echo "ok: a mistyped flag ends the job with exit code 2, not restarted"
  ;;
relaunch)
  at=$((12 + RANDOM % 6))
  start_supervised
  wait_for_step "$at"
  mapfile -t pids < <(ranks)
  kill -9 "${pids[RANDOM % ${#pids[@]}]}"
  starts() { grep -c '"event": *"start"' "$tmp/events.jsonl"; }
  for _ in $(seq 600); do [[ $(starts) -ge 2 ]] && break; sleep 0.02; done
  launcher=
  for _ in $(seq 200); do launcher=$(pgrep -f "^mpirun .*$tmp/" | head -n 1); [[ -n $launcher ]] && break; sleep 0.01; done
  [[ -n $launcher ]] || fail "no second attempt's mpirun"
  kill -9 "$launcher"
  echo "killed a rank after step $at, then the second attempt's mpirun (pid $launcher)"
  wait "$sup"
  code=$?
  sup=
  [[ $code == 0 ]] || fail "claw launch exited $code"
  grep -q "launch: the job completed after 2 restart(s)" "$tmp/launch.log" || fail "no completion after two restarts"
  /usr/bin/python3 - "$tmp/events.jsonl" "$launcher" <<'PY' || fail "the failures or the lost steps are wrong"
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
failures = [e for e in events if e["event"] == "failure"]
resumed = [e for e in events if e["event"] == "resumed"]
assert len(failures) == 2, failures
assert "killed by signal 9" in failures[0]["reason"] and "launcher" not in failures[0]["reason"], failures[0]
want = f"the launcher (mpirun pid {sys.argv[2]}) was killed by signal 9"
assert want in failures[1]["reason"], (want, failures[1])
assert failures[1]["last_step"] == 0, failures[1]  # it died before its first step
furthest = failures[0]["last_step"]
last = resumed[-1]
assert last["lost_steps"] == furthest - last["from_iteration"] > 0, (furthest, last)
print(f"ok: attempt 2's death names the launcher; attempt 3 resumed from iteration {last['from_iteration']}, "
      f"{last['lost_steps']} step(s) lost (attempt 1 had reached step {furthest})")
PY
  ;;
orphan)
  start_supervised
  wait_for_step 5
  [[ $(ranks | wc -l) == 4 ]] || fail "expected 4 running ranks"
  # A hang report from outside the job (no token, or a wrong one) is refused.
  url=$(grep -o "heartbeats at [^ ]*/heartbeat" "$tmp/launch.log" | head -n 1 | cut -d' ' -f3)
  forged='{"event":"hang","attempt":0,"rank":0,"world_size":4,"host":"x","pid":1,"step":1,"section":"data","report":"forged"}'
  for auth in "X-None: 1" "Authorization: Bearer 0123"; do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -H "$auth" -d "$forged" "$url")
    [[ $code == 401 ]] || fail "a heartbeat without the job's token ($auth) got HTTP $code"
  done
  sleep 1
  [[ -z $(event failure reason) ]] || fail "a forged hang report ended the attempt: $(event failure reason)"
  grep -q "without the job's token: refused" "$tmp/launch.log" || fail "the refused heartbeat is not logged"
  echo "ok: forged hang reports refused (401), the job went on"
  kill -9 "$sup"
  wait "$sup" 2>/dev/null
  sup=
  for _ in $(seq 300); do
    pgrep -f "$tmp/" >/dev/null || break
    sleep 0.1
  done
  left=$(pgrep -f "$tmp/" | wc -l)
  [[ $left == 0 ]] || { ps -o pid,stat,args -p "$(pgrep -d, -f "$tmp/")"; fail "$left processes outlived the supervisor"; }
  echo "ok: the supervisor killed, no rank left running"
  ;;
*) fail "unknown mode $mode" ;;
esac
echo "PASS"
