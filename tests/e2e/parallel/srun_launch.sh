#!/usr/bin/env bash
# claw ranks started by Slurm's srun (PMIx) instead of mpirun, on one machine:
# starts munged, slurmctld and slurmd under a private directory with free
# ports (RECIPES.md "Slurm on one machine"), runs
#   srun -n 2 --mpi=pmix test_comm
# and checks that both ranks joined one world of 2 and every test passed;
# then, given the claw binary, `srun -n 2 claw train` against the same run on
# one rank (equal per-step losses).
# The daemons are always stopped (trap), by the pids they wrote.
#
#   srun_launch.sh TEST_COMM [CLAW]
# With CLAW, also `claw launch --launcher srun` restarting a job whose rank
# was killed.
# Needs the Debian packages slurm-wlm and munge (scripts/setup installs them).
set -uo pipefail
prog=$1
claw=${2:-}

. "$(dirname "$0")/../../slurm_box.sh"

start=$(date +%s.%N)
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CLAW_TEST_EXPECT_WORLD_SIZE=2 \
  timeout 120 srun -n 2 --mpi=pmix --overcommit "$prog" >"$D/srun.out" 2>&1
rc=$?
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
echo "srun -n 2 test_comm: exit code $rc after $elapsed s; $(head -1 "$D/srun.out")"
((rc != 124)) || fail "srun did not finish within 120 s"
((rc == 0)) || fail "srun exit code $rc"
grep -q "^test_comm: 2 rank(s), mpi (" "$D/srun.out" || fail "rank 0 did not report a world of 2 MPI ranks"
grep -q "PASSED" "$D/srun.out" || fail "no PASSED line"
grep -q "FAILED" "$D/srun.out" && fail "a test failed"
# Both ranks ran (rank 1 checked the size too: World.Info with CLAW_TEST_EXPECT_WORLD_SIZE).
echo "PASS: srun started 2 ranks that formed one world of 2"

[[ -n $claw ]] || exit 0
args=(train --model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 1 --global-batch-size 4 --train-iters 8 --eval-interval 0 --peak-gflops 100 --num-threads 1)
"$claw" "${args[@]}" --metrics-file "$D/single.jsonl" >"$D/single.out" 2>&1 || fail "single-rank claw train"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  timeout 300 srun -n 2 --mpi=pmix --overcommit "$claw" "${args[@]}" --zero-stage 1 \
  --metrics-file "$D/srun.jsonl" >"$D/srun.out" 2>&1 || fail "srun -n 2 claw train (exit $?)"
grep -q "2 ranks (mpi" "$D/srun.out" || fail "claw train under srun did not form a world of 2"
/usr/bin/python3 - "$D/single.jsonl" "$D/srun.jsonl" <<'PY' || fail "losses differ"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 8, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert worst <= 2e-5, f"worst relative loss difference {worst}"
print(f"PASS: srun -n 2 claw train (ZeRO-1) equals one rank over 8 steps (worst relative difference {worst:.1e})")
PY

# claw launch --launcher srun: a rank killed at step 5 of 12 (checkpoints
# every 4 steps) costs one restart through srun; the job ends bitwise where
# an uninterrupted srun run ends. (This Slurm does not end the step when a
# task is killed: the other rank's hang detection finds it, after the 3 s
# floor set here instead of the default 20 s, as launch.sh's stop case does.)
"$claw" launch --launcher srun --nproc 2 --supervisor-host 127.0.0.1 \
  --launcher-args "--mpi=pmix --overcommit --kill-on-bad-exit=1" --events-file "$D/events.jsonl" -- \
  "${args[@]}" --zero-stage 1 --train-iters 12 --save "$D/ckpt" --save-interval 4 --hang-timeout-min 3 \
  --metrics-file "$D/launch.jsonl" >"$D/launch.out" 2>&1 &
sup=$!
for _ in $(seq 1200); do
  [[ -f $D/launch.jsonl && $(wc -l <"$D/launch.jsonl") -ge 5 ]] && break
  kill -0 $sup 2>/dev/null || { cat "$D/launch.out"; fail "claw launch ended before step 5"; }
  sleep 0.1
done
victim=$(pgrep -f "^[^ ]*claw train .*$D/launch.jsonl" | tail -n 1)
[[ -n $victim ]] || { cat "$D/launch.out"; fail "no rank to kill"; }
kill -9 "$victim"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  timeout 300 srun -n 2 --mpi=pmix --overcommit "$claw" "${args[@]}" --zero-stage 1 --train-iters 12 \
  --metrics-file "$D/full.jsonl" >"$D/full.out" 2>&1 || fail "the uninterrupted srun run (exit $?)"
wait $sup || { grep -v "^  " "$D/launch.out" | tail -n 30; fail "claw launch --launcher srun exited $?"; }
grep -q "launch: the job completed after 1 restart(s)" "$D/launch.out" || fail "no completion after one restart"
from=$(/usr/bin/python3 -c 'import json,sys; print([r for r in map(json.loads, open(sys.argv[1])) if r["event"]=="resumed"][-1]["from_iteration"])' "$D/events.jsonl")
/usr/bin/python3 "$(dirname "$0")/../cli/resumed_equal.py" "$D/full.jsonl" "$D/launch.jsonl" $((from + 1)) 12 ||
  fail "the restarted srun job differs"
grep "launch: \(attempt\|resumed\|warning\)" "$D/launch.out" | cut -c1-160
echo "PASS: claw launch --launcher srun restarted a killed rank's job from iteration $from, bitwise"
