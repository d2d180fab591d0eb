#!/usr/bin/env bash
# The MFU denominator is calibrated once and cached: two identical runs
# divide by the same figure (the first measures, the second reads the
# cache), `claw info` prints it, and a cached peak below what a training
# step reaches is raised so that MFU never exceeds 1.
#   mfu_peak.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
cache=$tmp/cache

run() {  # run NAME: a short gpt2-tiny run on 2 threads against $cache
  "$claw" train --model gpt2-tiny --num-layers 2 --micro-batch-size 2 --seq-length 64 --train-iters 4 \
    --eval-interval 0 --num-threads 2 --peak-cache-dir "$cache" --metrics-file "$tmp/$1.jsonl" >"$tmp/$1.log" 2>&1 ||
    { cat "$tmp/$1.log"; exit 1; }
}
raised='is above the cached GEMM peak; raising the MFU denominator'  # a step beat the cached peak
cached_peak() {  # the peak the cache holds now, as the runs print it
  /usr/bin/python3 -c 'import json,sys; print("%.1f" % max(e["gflops"] for e in json.load(open(sys.argv[1]))["entries"].values()))' "$cache/gemm_peak.json"
}
denominator() { grep -o 'MFU denominator: [0-9.]* GFLOP/s per rank' "$tmp/$1.log" || { cat "$tmp/$1.log"; echo "FAIL: $1 printed no MFU denominator"; exit 1; }; }

run first
run second
grep -q 'MFU denominator: .* measured now, best of 6 GEMM shape(s)' "$tmp/first.log" ||
  { grep 'MFU denominator' "$tmp/first.log"; echo "FAIL: the first run did not calibrate the model's 5 shapes and 2048^3"; exit 1; }
grep -q "MFU denominator: .* calibrated [0-9-]* [0-9:]* UTC, .*(cache $cache/gemm_peak.json)" "$tmp/second.log" ||
  { grep 'MFU denominator' "$tmp/second.log"; echo "FAIL: the second run did not take the peak from the cache"; exit 1; }
a=$(denominator first) b=$(denominator second)
# A step of the first run may beat the calibration (a busy machine measures
# low); it then raises the cache, and the second run divides by the raised
# figure. Either way the second run divides by what the first left cached.
if grep -q "$raised" "$tmp/first.log"; then
  c=$(cached_peak)
  [ "$b" = "MFU denominator: $c GFLOP/s per rank" ] ||
    { echo "FAIL: the first run raised the peak to $c but the second divided by '$b'"; exit 1; }
  echo "first run: $a, raised by a step to $c; second run: $b"
else
  [ "$a" = "$b" ] || { echo "FAIL: the same run divided by different peaks: '$a' then '$b'"; exit 1; }
  echo "both runs: $a"
fi

# claw info at the same thread count prints the cached figure.
"$claw" info --num-threads 2 --peak-cache-dir "$cache" >"$tmp/info" 2>&1 || { cat "$tmp/info"; exit 1; }
g=$(grep -o '^gemm_peak_gflops: [0-9.]*' "$tmp/info" | cut -d' ' -f2)
# (the second run may itself have raised it: info prints what is cached now)
c=$(cached_peak)
[ "$g" = "$c" ] || { cat "$tmp/info"; echo "FAIL: claw info's peak $g != the cached $c"; exit 1; }
grep -q "$raised" "$tmp/second.log" || [ "$b" = "MFU denominator: $g GFLOP/s per rank" ] ||
  { cat "$tmp/info"; echo "FAIL: claw info's peak $g != '$b'"; exit 1; }
grep -q '^gemm_peak_provenance: calibrated ' "$tmp/info" || { cat "$tmp/info"; echo "FAIL: no provenance"; exit 1; }

# A cache that claims 1 GFLOP/s is below any step: the first step raises it,
# the warning says so, and no step's MFU is above 1.
/usr/bin/python3 - "$cache/gemm_peak.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for e in j["entries"].values():
    e["gflops"] = 1.0
    e["shapes"] = {k: 1.0 for k in e["shapes"]}
json.dump(j, open(sys.argv[1], "w"))
PY
run raised
grep -q "$raised" "$tmp/raised.log" ||
  { cat "$tmp/raised.log"; echo "FAIL: a step above the cached peak did not raise it"; exit 1; }
/usr/bin/python3 - "$tmp/first.jsonl" "$tmp/second.jsonl" "$tmp/raised.jsonl" "$cache/gemm_peak.json" <<'PY'
import json, statistics, sys
runs = [[json.loads(l) for l in open(p)] for p in sys.argv[1:4]]
for path, recs in zip(sys.argv[1:4], runs):
    assert len(recs) == 4, f"{path}: {len(recs)} records"
    for r in recs:
        assert 0 < r["mfu"] <= 1 + 1e-12, f"{path}: step {r['step']} MFU {r['mfu']} outside (0, 1]"
peak = max(e["gflops"] for e in json.load(open(sys.argv[4]))["entries"].values())
assert peak > 1.0, f"the cached peak was not raised: {peak}"
# Step times are not asserted (no timing in tests); the figures are printed.
m = [statistics.median(r["mfu"] for r in recs[1:]) for recs in runs[:2]]
print(f"median MFU after step 1: {m[0]:.4f}, {m[1]:.4f}; raised peak {peak:.1f} GFLOP/s")
PY
echo PASS
