# Sourced by the train_*.sh tests. Uses the caller's $claw, $tmp, $here,
# common and mpirun arrays, and fail().
#
# reference NAME ARGS...: the single-rank `claw train ARGS` into
# $tmp/NAME.jsonl and $tmp/NAME.log. Under ctest it is computed once per
# suite: $CLAW_TEST_REFS (tests/e2e/parallel/CMakeLists.txt; emptied at the start of
# each run by the fixture mpi_references, which also computes the references
# several scripts share) keeps each run under a hash of its arguments, and the
# first script to need one computes it while any other waits on its lock.
# With $ref_stop = K set, only the first K steps are wanted: the run stops
# there (--exit-interval K), unless the whole run is at hand already.
reference() {
  local name=$1
  shift
  local stop=()
  [[ -z ${ref_stop:-} ]] || stop=(--exit-interval "$ref_stop")
  if [[ -z ${CLAW_TEST_REFS:-} ]]; then
    "$claw" train "$@" "${stop[@]}" --metrics-file "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 ||
      { cat "$tmp/$name.log"; fail "$name: single-rank run"; }
    return
  fi
  local key
  key=$(printf '%s\n' "$@" | sha1sum | cut -c1-16)
  local at=$CLAW_TEST_REFS/$key
  [[ -z ${ref_stop:-} || -f $at.jsonl ]] || at=$at.s$ref_stop
  (
    flock 9
    if [[ ! -f $at.jsonl ]]; then
      "$claw" train "$@" "${stop[@]}" --metrics-file "$at.part.jsonl" >"$at.log" 2>&1 || { cat "$at.log"; exit 1; }
      mv "$at.part.jsonl" "$at.jsonl"
    fi
  ) 9>"$at.lock" || fail "$name: single-rank run"
  cp "$at.jsonl" "$tmp/$name.jsonl"
  cp "$at.log" "$tmp/$name.log"
}

# compare NAME EXTRA_ARGS... -- RUN...: the single-rank run of NAME
# (reference "${common[@]}" EXTRA_ARGS), then each RUN, "NP[:STEPS] FLAGS",
# under mpirun: its per-step losses and validation losses must equal the
# reference's within $loss_rtol (relative, default 1e-6; grad norms
# $grad_rtol, default 2e-5; compare_metrics.py). A run given STEPS stops
# after them (--exit-interval: the same schedule as the whole run) and is
# compared with the reference's first STEPS steps.
# Before each run compare calls before_run if the caller defines it; after
# it, check_layout LOG FLAGS (defined by the caller) checks the layout line.
compare() {
  local name=$1
  shift
  local extra=()
  while [[ $1 != -- ]]; do extra+=("$1"); shift; done
  shift
  # The reference goes as far as the longest run.
  local run np steps flags run_name stop ref_stop=0
  for run in "$@"; do
    read -r np flags <<<"$run"
    if [[ $np != *:* ]]; then ref_stop=; break; fi
    ((${np#*:} > ref_stop)) && ref_stop=${np#*:}
  done
  reference "$name" "${common[@]}" "${extra[@]}"
  for run in "$@"; do
    read -r np flags <<<"$run"
    stop=()
    if [[ $np == *:* ]]; then
      steps=${np#*:} np=${np%%:*}
      stop=(--exit-interval "$steps")
    else
      steps=$(wc -l <"$tmp/$name.jsonl")
    fi
    run_name="${name}_np${np}_$(echo "$flags" | sed 's/-model-parallel-size /-/g; s/-parallel-size /-/g; s/--//g' | tr -cd 'a-z0-9_')"
    ! declare -F before_run >/dev/null || before_run
    # shellcheck disable=SC2086
    timeout 300 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" "${extra[@]}" $flags "${stop[@]}" \
      --metrics-file "$tmp/$run_name.jsonl" </dev/null >"$tmp/$run_name.log" 2>&1 ||
      { cat "$tmp/$run_name.log"; fail "mpirun -np $np claw train ${extra[*]} $flags ${stop[*]}"; }
    check_layout "$tmp/$run_name.log" "$flags" || fail "$run_name: the layout line does not name the layout"
    /usr/bin/python3 "$here/compare_metrics.py" "$tmp/$name.jsonl" "$tmp/$run_name.jsonl" "$run_name" "$steps" \
      --loss-rtol "${loss_rtol:-1e-6}" --grad-rtol "${grad_rtol:-2e-5}" || exit 1
  done
}

# caught NAME FAULT EXTRA_ARGS... -- "NP:STEPS FLAGS": a mutation test. The
# run of compare's form, with --test-fault FAULT planting a bug (core/
# fault_injector.h), must be told apart from the reference by the same
# shortened comparison; the fault's log line shows it took effect.
caught() {
  local name=$1 fault=$2
  shift 2
  local extra=()
  while [[ $1 != -- ]]; do extra+=("$1"); shift; done
  shift
  local np steps flags ref_stop
  read -r np flags <<<"$1"
  steps=${np#*:} np=${np%%:*}
  ref_stop=$steps
  reference "$name" "${common[@]}" "${extra[@]}"
  # shellcheck disable=SC2086
  timeout 300 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" "${extra[@]}" $flags --exit-interval "$steps" \
    --test-fault "$fault" --metrics-file "$tmp/mutant.jsonl" </dev/null >"$tmp/mutant.log" 2>&1 ||
    { cat "$tmp/mutant.log"; fail "mpirun -np $np claw train $flags --test-fault $fault"; }
  grep -q -- "--test-fault ${fault%%:*}" "$tmp/mutant.log" || { cat "$tmp/mutant.log"; fail "$fault never took effect"; }
  if /usr/bin/python3 "$here/compare_metrics.py" "$tmp/$name.jsonl" "$tmp/mutant.jsonl" mutant "$steps" \
       --loss-rtol "${loss_rtol:-1e-6}" --grad-rtol "${grad_rtol:-2e-5}" >"$tmp/mutant.cmp" 2>&1; then
    cat "$tmp/mutant.cmp"
    fail "$fault at -np $np $flags: the $steps-step comparison did not catch it"
  fi
  echo "ok: $fault at -np $np $flags is caught within $steps steps: $(grep -m1 AssertionError "$tmp/mutant.cmp")"
}
