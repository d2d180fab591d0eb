#!/usr/bin/env bash
# Training across two emulated data centres (tests/e2e/net/dc_net.sh, run as
# root): 4 ranks, two hosts of one rank in each centre, joined by
# tools/wan_forwarder, which counts the TCP payload that crosses.
#
#   dc_link.sh CLAW_BINARY WAN_FORWARDER CASE
#
# bytes      over a zero-delay link, the payload crossing per step with
#            --data-centers 2 equals the closed form of the hierarchical
#            reduction (each of the DP ranks all-reduces gradient bytes /
#            DP-per-instance across the N instances, a ring sending
#            2 (N - 1) / N of it): within 1%. Per step = the difference of a
#            9-step and a 3-step run over 6, so start-up traffic cancels. The
#            flat ZeRO-1 run's crossing is printed beside it.
# blackhole  the link stops passing packets at step 3: the job ends with the
#            communication timeout (exit 4) naming an operation on a group
#            that spans the data centres, instead of hanging.
set -uo pipefail
claw=$1
fwd=$2
case_name=$3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
# shellcheck source=dc_net.sh
source "$here/dc_net.sh"
cleanup() { dc_down; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
dc_up dl$$x 2 1 "$tmp" || fail "cannot create network namespaces (run as root)"
job=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
     --micro-batch-size 1 --global-batch-size 8 --eval-interval 0 --lr 2e-3 --num-threads 1
     --straggler-report-interval 0 --use-distributed-optimizer)

payload() { /usr/bin/python3 -c 'import json,sys; s=json.loads(sys.argv[1]); print(s["a_to_b"]["tcp_payload"] + s["b_to_a"]["tcp_payload"])' "$1"; }

case $case_name in
bytes)
  dc_link "$fwd" 0 20000 || fail "the link did not come up"
  declare -A per_step
  for layout in dc2 flat; do
    flags=()
    [[ $layout == dc2 ]] && flags=(--data-centers 2)
    declare -A crossed
    for iters in 3 9; do
      before=$(payload "$(dc_stats)")
      dc_mpirun -np 4 "$claw" train "${job[@]}" "${flags[@]}" --train-iters $iters >"$tmp/$layout$iters.log" 2>&1 ||
        { tail -n 20 "$tmp/$layout$iters.log"; fail "$layout, $iters steps"; }
      crossed[$iters]=$(( $(payload "$(dc_stats)") - before ))
    done
    per_step[$layout]=$(( (crossed[9] - crossed[3]) / 6 ))
  done
  line=$(grep -m1 "hierarchical gradient reduction" "$tmp/dc29.log") || fail "no hierarchical reduction line"
  echo "$line"
  elements=$(echo "$line" | sed -n 's/.*reduction: \([0-9]*\) fp32 gradient elements.*/\1/p')
  /usr/bin/python3 - "$elements" "${per_step[dc2]}" "${per_step[flat]}" <<'PY' || fail "bytes across the boundary"
import sys
elements, got, flat = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dp, n = 4, 2
closed = dp * (elements * 4 / (dp // n)) * 2 * (n - 1) / n
rel = abs(got - closed) / closed
print(f"per step across the boundary: {got} B with --data-centers 2, closed form {closed:.0f} B "
      f"(gradients {elements * 4} B / {dp // n} per instance x 2({n}-1)/{n} x {dp} ranks): {rel:.2%} off; "
      f"flat data parallelism: {flat} B ({flat / got:.2f}x)")
assert rel < 0.01, f"{rel:.2%} from the closed form"
PY
  echo PASS ;;
blackhole)
  dc_link "$fwd" 0 20000 || fail "the link did not come up"
  dc_mpirun -np 4 "$claw" train "${job[@]}" --data-centers 2 --train-iters 100000 --log-interval 1 \
    --distributed-timeout-minutes 0.1 >"$tmp/log" 2>&1 &
  job_pid=$!
  for _ in $(seq 600); do grep -qE "step +3/" "$tmp/log" && break; sleep 0.1; done
  grep -qE "step +3/" "$tmp/log" || { cat "$tmp/log"; fail "training did not start"; }
  dc_blackhole
  start=$(date +%s.%N)
  for _ in $(seq 600); do grep -q "did not complete within" "$tmp/log" && break; sleep 0.1; done
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  # The link comes back so that the launcher's daemons, on both sides of it,
  # can tear the job down.
  dc_blackhole
  timeout 120 tail --pid=$job_pid -f /dev/null
  wait $job_pid
  rc=$?
  grep -m3 "did not complete within" "$tmp/log"
  grep -q "did not complete within 6.0 s" "$tmp/log" || { tail -n 30 "$tmp/log"; fail "no timeout error"; }
  grep "did not complete within" "$tmp/log" | grep -q "(across 2 data centres)" ||
    fail "the timeout does not name a group across the data centres"
  [[ $rc -eq 4 ]] || { tail -n 30 "$tmp/log"; fail "exit $rc, expected 4 (communication failure or timeout)"; }
  echo "ok: the black hole was reported ${secs}s after it began, exit $rc"
  echo PASS ;;
*) fail "unknown case $case_name" ;;
esac
