#!/usr/bin/env bash
# `claw rl` (GRPO) end to end, on a gpt2-tiny taught the reversal task's
# format by a short SFT from scratch (scripts/sft_task.py; 100 steps, made
# in FIXTURE_DIR by the case `fixture`: ctest's rl_base, once per suite).
#
#   rl.sh CLAW_BINARY CASE FIXTURE_DIR
#
# layouts    4 GRPO steps (KL to the reference, importance correction):
#            the colocated single-rank run; one learner + one rollout worker
#            (mpirun -np 2) equals it bitwise; learners at TP 2 + SP, DP 2
#            with ZeRO-1 and PP 2 beside one rollout worker (-np 3) equal it
#            (2e-5), so the weight sets resharded from each layout are the
#            learner's; LoRA (rank 8, all-linear) colocated against TP 2.
#            Runs are --learner-batch-invariant (the learners' forward in
#            the engine's kernels) but one colocated run in the default
#            BLAS GEMMs and flash attention, which equals the colocated run
#            (5e-5: every forward in other kernels). Every run: the generator's behaviour log-probabilities
#            equal the learner's recomputed ones at the same weights,
#            bitwise, within 1e-5 absolute for TP learners (sums in parts)
#            and LoRA (adapters folded into the generator's weights), and
#            on average in the default kernels.
# staleness  one learner + one rollout worker: --async --max-staleness 0
#            equals the synchronous run bitwise; with K = 1 and 2 every
#            trajectory used is at most K versions old, and the generator
#            does run ahead (age K at some step).
# env        scripts/rl_env.py as an external environment (2 turns when the
#            first reply is wrong, rewarded by the mean of the replies' scores
#            so a gradient does not hang on the base guessing a word right on
#            the retry it was never taught; every 7th episode hangs, every 11th
#            answers HTTP 500) with one learner and one rollout worker: all
#            steps train, hung episodes time out (--env-timeout) and failed
#            ones are counted, multi-turn replies are all found and learned,
#            and their log-probabilities equal the learner's bitwise
#            (--learner-batch-invariant).
# kill       one learner and two rollout workers (mpirun --enable-recovery,
#            --async, 12 steps): rollout worker 1 is killed (SIGKILL) after step 2;
#            learner rank 0 loses it at --rollout-timeout, samples its
#            prompts from then on, and every step trains (workers_lost 1).
# resume     a colocated run stopped after 2 of 4 steps and resumed from its
#            checkpoint gives steps 3 and 4 bitwise (learner, optimizer,
#            reference, versions and seeds in the checkpoint).
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2
fixture=$3
root=$(cd "$here/../../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
check() { /usr/bin/python3 "$here/rl_check.py" "$@" || exit 1; }

start=(--load "$fixture/sft" --finetune)
common=(--prompt-data "$fixture/task/train.jsonl" --task reverse
        --global-batch-size 16 --micro-batch-size 8 --num-generations 4 --seq-length 48 --max-new-tokens 12
        --num-threads 1 --lr 1e-4 --eval-interval 0 --train-iters 4 --distributed-timeout-minutes 3)

# run NAME NP [flags...]: claw rl on NP ranks (0: no launcher), metrics in
# $tmp/NAME.jsonl; with $LEARNER's flags (LEARNER= run ...: the default kernels).
LEARNER=--learner-batch-invariant
run() {
  local name=$1 np=$2
  shift 2
  local launch=()
  ((np > 0)) && launch=(timeout 300 "${mpirun[@]}" -np "$np")
  # shellcheck disable=SC2086
  "${launch[@]}" "$claw" rl "${start[@]}" "${common[@]}" $LEARNER "$@" --metrics-file "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; fail "$name: claw rl ${*}"; }
}

# The SFT base and prompt files, made once per build tree by whichever case
# runs first (the others wait on the lock).
make_fixture() {
  rm -rf "$fixture"
  mkdir -p "$fixture"
  /usr/bin/python3 "$root/scripts/sft_task.py" --task reverse --train 2000 --test 50 --out "$fixture/task" >/dev/null
  "$claw" preprocess --input "$fixture/task/train.jsonl" --output-prefix "$fixture/reverse" --sft \
    --chat-template plain >"$fixture/preprocess.log" 2>&1 || { cat "$fixture/preprocess.log"; fail "preprocess"; }
  "$claw" train --model gpt2-tiny --sft --data-path "$fixture/reverse_sft_document" --split 1,0,0 --seq-length 48 \
    --micro-batch-size 16 --train-iters 100 --lr 2e-3 --min-lr 2e-4 --lr-warmup-iters 10 --eval-interval 0 \
    --save "$fixture/sft" >"$fixture/sft.log" 2>&1 || { cat "$fixture/sft.log"; fail "SFT of the base"; }
  echo "fixture: SFT base $(grep -o 'done: .*' "$fixture/sft.log")"
}
mkdir -p "$(dirname "$fixture")"
exec 9>"$fixture.lock"
flock 9
# `fixture` remakes it (ctest's rl_base, once per suite); a case run alone
# makes it if it is missing.
if [[ $case_name == fixture ]]; then make_fixture; exit 0; fi
[[ -f $fixture/sft/latest_checkpointed_iteration.txt ]] || make_fixture
flock -u 9

case $case_name in
layouts)
  extra=(--kl-beta 0.05 --importance-correction)
  run ref 0 "${extra[@]}"
  check mismatch "$tmp/ref.jsonl" 1e-5 "colocated" --exact
  LEARNER= run blas 0 "${extra[@]}"
  check equal "$tmp/ref.jsonl" "$tmp/blas.jsonl" "colocated, BLAS and flash attention in the learner" --tol 5e-5
  check mismatch "$tmp/blas.jsonl" 1e-5 "colocated, BLAS and flash attention in the learner" --mean
  run mpmd 2 "${extra[@]}" --rollout-workers 1
  check equal "$tmp/ref.jsonl" "$tmp/mpmd.jsonl" "1 learner + 1 rollout worker" --exact
  for layout in "--tensor-model-parallel-size 2 --sequence-parallel" "--use-distributed-optimizer" \
                "--pipeline-model-parallel-size 2"; do
    name=$(echo "$layout" | tr -cd 'a-z0-9')
    # shellcheck disable=SC2086
    run "$name" 3 "${extra[@]}" --rollout-workers 1 $layout
    check equal "$tmp/ref.jsonl" "$tmp/$name.jsonl" "learners $layout + 1 rollout worker"
    exact=--exact
    [[ $layout == --tensor* ]] && exact=""
    check mismatch "$tmp/$name.jsonl" 1e-5 "learners $layout" $exact
  done
  lora=(--lora-rank 8 --lora-alpha 16 --lr 1e-3)
  run lora_ref 0 "${lora[@]}"
  run lora_tp2 3 "${lora[@]}" --rollout-workers 1 --tensor-model-parallel-size 2
  check equal "$tmp/lora_ref.jsonl" "$tmp/lora_tp2.jsonl" "LoRA: learners TP 2 + 1 rollout worker"
  check mismatch "$tmp/lora_tp2.jsonl" 1e-5 "LoRA learners TP 2 (adapters folded into the generator's weights)"
  ;;
staleness)
  run sync 2 --rollout-workers 1 --train-iters 5
  check mismatch "$tmp/sync.jsonl" 1e-5 "synchronous" --exact
  check staleness "$tmp/sync.jsonl" 0 "synchronous"
  run async0 2 --rollout-workers 1 --train-iters 5 --async --max-staleness 0
  check equal "$tmp/sync.jsonl" "$tmp/async0.jsonl" "--async --max-staleness 0 against synchronous" --exact
  for k in 1 2; do
    run "async$k" 2 --rollout-workers 1 --train-iters 5 --async --max-staleness $k
    check staleness "$tmp/async$k.jsonl" $k "--async --max-staleness $k" --ahead
  done
  ;;
env)
  /usr/bin/python3 "$root/scripts/rl_env.py" --port 0 --port-file "$tmp/port" --turns 2 --reward mean --hang-every 7 \
    --fail-every 11 >"$tmp/env_server.log" 2>&1 &
  env_pid=$!
  trap 'kill $env_pid 2>/dev/null; rm -rf "$tmp"' EXIT
  for _ in $(seq 100); do [[ -s $tmp/port ]] && break; sleep 0.1; done
  [[ -s $tmp/port ]] || { cat "$tmp/env_server.log"; fail "rl_env.py did not start"; }
  run env 2 --rollout-workers 1 --env-url "http://127.0.0.1:$(cat "$tmp/port")" --env-timeout 3 --train-iters 3 \
    --seq-length 80 --max-new-tokens 12
  check env "$tmp/env.jsonl" 3 "external environment, 1 learner + 1 rollout worker"
  check mismatch "$tmp/env.jsonl" 1e-5 "multi-turn episodes" --exact
  ;;
kill)
  # Ranks of this job carry its tag: other tests' claw rl jobs may run beside it.
  tag="rl_kill_$$"
  timeout 300 "${mpirun[@]}" --enable-recovery -x "CLAW_TEST_TAG=$tag" -np 3 "$claw" rl "${start[@]}" "${common[@]}" --rollout-workers 2 \
    --async --train-iters 12 --rollout-timeout 5 --metrics-file "$tmp/kill.jsonl" >"$tmp/kill.log" 2>&1 &
  job=$!
  for _ in $(seq 600); do [[ -s $tmp/kill.jsonl && $(wc -l <"$tmp/kill.jsonl") -ge 2 ]] && break; sleep 0.1; done
  victim=""
  for p in $(pgrep -f "$claw rl"); do
    env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)
    if grep -qx OMPI_COMM_WORLD_RANK=2 <<<"$env" && grep -qx "CLAW_TEST_TAG=$tag" <<<"$env"; then victim=$p; fi
  done
  [[ -n $victim ]] || { kill "$job"; cat "$tmp/kill.log"; fail "no rank 2 to kill"; }
  kill -9 "$victim"
  wait "$job"
  rc=$?
  grep -q "rollout worker 1 (rank 2) is lost" "$tmp/kill.log" || { cat "$tmp/kill.log"; fail "the killed worker was not reported lost"; }
  ((rc == 0)) || { cat "$tmp/kill.log"; fail "the job failed (exit $rc) after a rollout worker was killed"; }
  /usr/bin/python3 - "$tmp/kill.jsonl" <<'PY' || exit 1
import json, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
assert [r["step"] for r in recs] == list(range(1, 13)), [r["step"] for r in recs]
assert recs[-1]["workers_lost"] == 1, recs[-1]["workers_lost"]
ages = [r["staleness_max"] for r in recs]
assert max(ages) <= 1, f"trajectory ages {ages} beyond --max-staleness 1"
assert any(r["grad_norm"] > 0 for r in recs if r["workers_lost"]), [r["grad_norm"] for r in recs]
lost_at = next(r["step"] for r in recs if r["workers_lost"])
print(f"ok killed rollout worker: lost at step {lost_at}, all 12 steps trained (rollout wait that step "
      f"{recs[lost_at - 1]['rollout_wait_s']:.1f} s, then {recs[-1]['rollout_wait_s']:.2f} s)")
PY
  ;;
resume)
  extra=(--kl-beta 0.05)
  run whole 0 "${extra[@]}" --save "$tmp/whole"
  run first 0 "${extra[@]}" --save "$tmp/part" --train-iters 2
  start=(--load "$tmp/part")  # the interrupted run's checkpoint, without --finetune
  run second 0 "${extra[@]}" --save "$tmp/part"
  grep -q "resuming .* at step 3" "$tmp/second.log" || { cat "$tmp/second.log"; fail "the second run did not resume"; }
  tail -n 2 "$tmp/whole.jsonl" >"$tmp/whole_tail.jsonl"
  check equal "$tmp/whole_tail.jsonl" "$tmp/second.jsonl" "resumed at step 3" --exact
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
