# Sourced by the train_*.sh tests. refused NP FLAGS WANT [RC]: `mpirun -np NP
# claw train "${common[@]}" FLAGS` must fail (with exit code RC if given)
# before training starts, with an error saying WANT; prints the error and how
# long the job took to end. Uses the
# caller's $claw, $tmp, common and mpirun arrays, and fail().
# Each check runs in the background (a refused job spends its second or two
# waiting for the launcher to take the ranks down, not computing);
# refusals_checked waits for all of them and fails if any failed.
refusal_pids=()
refused() {
  local np=$1 flags=$2 want=$3 want_rc=${4:-}
  local log=$tmp/refused_${#refusal_pids[@]}.log
  (
    start=$(date +%s.%N)
    # shellcheck disable=SC2086
    timeout 120 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" $flags </dev/null >"$log" 2>&1
    rc=$?
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    [[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$log"; fail "$flags: exit $rc"; }
    [[ -z $want_rc || $rc -eq $want_rc ]] || { cat "$log"; fail "$flags: exit $rc, expected $want_rc"; }
    grep -q -- "$want" "$log" || { cat "$log"; fail "$flags: the error does not say '$want'"; }
    grep -qE "step +1/" "$log" && fail "$flags: training started"
    echo "ok ($secs s): $(grep -m1 -o "error.*" "$log" | cut -c1-200)"
  ) &
  refusal_pids+=($!)
}
refusals_checked() {
  local pid failed=0
  for pid in "${refusal_pids[@]}"; do wait "$pid" || failed=1; done
  refusal_pids=()
  return $failed
}
