#!/usr/bin/env bash
# Straggler detection: 4 ranks (DP 4) compare their own work (wall time
# less communication waits) every 20 steps.
#   - rank 2 slowed to half speed (--test-fault slow:2:2: it sleeps as long
#     as its forward and backward took) is named within two reports, in the
#     log and in the metrics (straggler_ranks);
#   - a clean 200-step run names no rank (threshold 0.75 of the median).
#   straggler.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
claw=$1
mpirun=(mpirun --oversubscribe --bind-to none -np 4)
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
        --micro-batch-size 1 --global-batch-size 4 --eval-interval 1000 --eval-iters 1 --num-threads 1
        --peak-gflops 100 --log-interval 50 --straggler-report-interval 20)

timeout 300 "${mpirun[@]}" "$claw" train "${common[@]}" --train-iters 40 --test-fault slow:2:2 \
  --metrics-file "$tmp/slow.jsonl" </dev/null >"$tmp/slow.log" 2>&1 || { cat "$tmp/slow.log"; fail "the slowed run"; }
grep -q "straggler: warning: rank 2 ran at 0\.[0-9]* of the median rank's speed over steps" "$tmp/slow.log" ||
  { grep -i straggler "$tmp/slow.log"; fail "rank 2 was not named"; }
grep "straggler: warning" "$tmp/slow.log" | head -2
/usr/bin/python3 - "$tmp/slow.jsonl" <<'PY' || fail "the slowed run's metrics"
import json, sys
reports = [(r["step"], r["straggler_ranks"]) for r in map(json.loads, open(sys.argv[1])) if "straggler_ranks" in r]
print("reports:", reports)
assert [s for s, _ in reports] == [20, 40], reports
assert any(ranks == [2] for _, ranks in reports), reports  # within two reports
assert all(set(ranks) <= {2} for _, ranks in reports), reports  # no other rank named
PY

timeout 600 "${mpirun[@]}" "$claw" train "${common[@]}" --train-iters 200 --metrics-file "$tmp/clean.jsonl" \
  </dev/null >"$tmp/clean.log" 2>&1 || { cat "$tmp/clean.log"; fail "the clean run"; }
! grep "straggler: warning" "$tmp/clean.log" || fail "a clean run named a straggler"
/usr/bin/python3 - "$tmp/clean.jsonl" <<'PY' || fail "the clean run's metrics"
import json, sys
reports = [(r["step"], r["straggler_ranks"], r["min_relative_speed"]) for r in map(json.loads, open(sys.argv[1]))
           if "straggler_ranks" in r]
assert len(reports) == 10 and all(not ranks for _, ranks, _ in reports), reports
print(f"clean run: 10 reports, no rank named; slowest relative speed {min(s for _, _, s in reports):.2f}")
PY
echo "PASS"
