# Sourced by the train_*.sh tests. compare NAME EXTRA_ARGS... -- RUN...: the
# single-rank `claw train "${common[@]}" EXTRA_ARGS` of NAME, then each
# "NP FLAGS" run under mpirun, whose per-step losses and validation losses
# must equal it within $loss_rtol (relative, default 1e-6; grad norms
# $grad_rtol, default 2e-5; compare_metrics.py).
# After each run, check_layout LOG FLAGS (defined by the caller) checks the
# layout line. Uses the caller's $claw, $tmp, $here, common and mpirun
# arrays, and fail().
compare() {
  local name=$1
  shift
  local extra=()
  while [[ $1 != -- ]]; do extra+=("$1"); shift; done
  shift
  "$claw" train "${common[@]}" "${extra[@]}" --metrics-file "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; fail "$name: single-rank run"; }
  local run np flags run_name
  for run in "$@"; do
    read -r np flags <<<"$run"
    run_name="${name}_np${np}_$(echo "$flags" | sed 's/-model-parallel-size /-/g; s/-parallel-size /-/g; s/--//g' | tr -cd 'a-z0-9_')"
    # shellcheck disable=SC2086
    timeout 300 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" "${extra[@]}" $flags \
      --metrics-file "$tmp/$run_name.jsonl" </dev/null >"$tmp/$run_name.log" 2>&1 ||
      { cat "$tmp/$run_name.log"; fail "mpirun -np $np claw train ${extra[*]} $flags"; }
    check_layout "$tmp/$run_name.log" "$flags" || fail "$run_name: the layout line does not name the layout"
    /usr/bin/python3 "$here/compare_metrics.py" "$tmp/$name.jsonl" "$tmp/$run_name.jsonl" "$run_name" 20 \
      --loss-rtol "${loss_rtol:-1e-6}" --grad-rtol "${grad_rtol:-2e-5}" || exit 1
  done
}
