#!/usr/bin/env bash
# Fault tests of the comm layer: a 3-rank job (comm_fault.cc) must end on its
# own, quickly, saying what went wrong, never wait for mpirun's --timeout.
#
#   comm_fault.sh MPIEXEC COMM_FAULT CASE
#     clean    no fault: all operations complete, exit 0 (the program works)
#     hang     --test-fault hang:1:world:5 (an injector passed in WorldOptions)
#              with a 3 s timeout: ranks 0 and 2 print "did not complete
#              within", flight records listing all_reduce seq 5 RUNNING or
#              QUEUED; the job aborts with exit code 4 (communication,
#              retryable; core/error.h)
#     kill     rank 1 SIGKILLs itself after 3 operations: the job ends within
#              seconds and the output names rank 1 and signal 9
#     split    rank 1 reaches World::split 30 s after the others: they time
#              out after 3 s naming the group, and abort the job (exit code 4)
# Prints how long the job took (and, for kill, from the kill to the end).
set -uo pipefail
mpiexec=$1
prog=$2
case_=$3
mpi_timeout=60  # mpirun's own limit: the job must end well before it
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() {
  echo "FAIL ($case_): $*"
  echo "---- job output"
  cat "$out"
  exit 1
}

case $case_ in
  clean) flags=() ;;
  hang) flags=(--test-fault hang:1:world:5) ;;
  kill) flags=(--kill-rank 1 --kill-after 3) ;;
  split) flags=(--split-late-rank 1) ;;
  *) echo "unknown case $case_"; exit 2 ;;
esac

start=$(date +%s.%N)
"$mpiexec" -np 3 --oversubscribe --bind-to none --timeout $mpi_timeout "$prog" "${flags[@]}" >"$out" 2>&1
rc=$?
end=$(date +%s.%N)
elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
echo "comm_fault $case_: job ended in $elapsed s with exit code $rc"
(( rc != 110 )) || fail "mpirun's --timeout $mpi_timeout ended the job (exit 110): the job hung"

case $case_ in
  clean)
    ((rc == 0)) || fail "exit code $rc"
    grep -q "comm_fault: all 20 operations completed" "$out" || fail "no completion line"
    ;;
  hang)
    ((rc != 0)) || fail "exit code 0 although rank 1 hung"
    # Timeout 3 s + abort grace 2 s + start-up; 25 s leaves room for a loaded machine.
    awk -v e="$elapsed" 'BEGIN { exit !(e < 25) }' || fail "took $elapsed s (expected about 6)"
    for r in 0 2; do
      grep -Eq "^\[rank $r/3\] comm_fault: .*all_reduce #5 on group world .*did not complete within 3\.0 s" "$out" ||
        fail "rank $r did not report the timeout of all_reduce #5"
      grep -Eq "^\[claw rank $r/3\] comm: flight record: last" "$out" || fail "rank $r printed no flight record"
      grep -Eq "^\[claw rank $r/3\] comm: .*group world +all_reduce +seq +5 .*(RUNNING|QUEUED)" "$out" ||
        fail "rank $r's flight record does not show all_reduce seq 5 RUNNING or QUEUED"
      grep -Eq "^\[claw rank $r/3\] comm: .*all_reduce +seq +4 .*done in" "$out" ||
        fail "rank $r's flight record does not show seq 4 done"
    done
    grep -q "test fault hang:1:world:5: this rank never joins all_reduce #5" "$out" ||
      fail "the hung rank did not log the injected fault"
    # MPI_Abort(4) makes mpirun exit 4 (its "MPI_ABORT was invoked" notice
    # is not reliable: with two ranks aborting at once it may fail to print).
    ((rc == 4)) || fail "exit code $rc, expected abort_job's 4 (communication failure)"
    grep -Eq "^\[claw rank [02]/3\] comm: aborting the job \(3 ranks, exit code 4\)" "$out" ||
      fail "no rank called abort_job with 4"
    ;;
  kill)
    ((rc == 137)) || fail "exit code $rc, expected 137 (mpirun's code for a rank killed by SIGKILL)"
    grep -q "comm_fault: all 20 operations completed" "$out" && fail "the job completed although rank 1 was killed"
    killed_at=$(sed -n 's/^\[rank 1\/3\] comm_fault: killing myself with SIGKILL before operation 4 at \([0-9.]*\)$/\1/p' "$out")
    [[ -n $killed_at ]] || fail "rank 1 did not announce its kill"
    after=$(awk -v a="$killed_at" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
    echo "comm_fault kill: job ended $after s after rank 1 was killed"
    awk -v e="$after" 'BEGIN { exit !(e < 10) }' || fail "took $after s after the kill (expected about 1)"
    grep -Eq "process rank 1 with PID [0-9]+ on node .* exited on signal 9" "$out" ||
      fail "the output does not name rank 1 as killed by signal 9"
    ;;
  split)
    ((rc != 0)) || fail "exit code 0 although rank 1 was late"
    awk -v e="$elapsed" 'BEGIN { exit !(e < 25) }' || fail "took $elapsed s (expected about 6; rank 1 sleeps 30 s)"
    for r in 0 2; do
      grep -Eq "^\[rank $r/3\] comm_fault: .*creating group late \(MPI_Comm_split over the world\) did not complete within 3\.0 s" "$out" ||
        fail "rank $r did not report the timeout of the split"
    done
    ((rc == 4)) || fail "exit code $rc, expected abort_job's 4 (communication failure)"
    grep -Eq "^\[claw rank [02]/3\] comm: aborting the job \(3 ranks, exit code 4\)" "$out" ||
      fail "no rank called abort_job with 4"
    ;;
esac
echo "PASS ($case_)"
