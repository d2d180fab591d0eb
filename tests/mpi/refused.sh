# Sourced by the train_*.sh tests. refused NP FLAGS WANT: `mpirun -np NP claw
# train "${common[@]}" FLAGS` must fail before training starts, with an error
# saying WANT; prints the error and how long the job took to end. Uses the
# caller's $claw, $tmp, common and mpirun arrays, and fail().
refused() {
  local np=$1 flags=$2 want=$3
  local start rc secs
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  timeout 120 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" $flags </dev/null >"$tmp/log" 2>&1
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  [[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$tmp/log"; fail "$flags: exit $rc"; }
  grep -q -- "$want" "$tmp/log" || { cat "$tmp/log"; fail "$flags: the error does not say '$want'"; }
  grep -q "step 1/" "$tmp/log" && fail "$flags: training started"
  echo "ok ($secs s): $(grep -m1 -o "error.*" "$tmp/log" | cut -c1-200)"
}
