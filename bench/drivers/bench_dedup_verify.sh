#!/usr/bin/env bash
# The cost of MinHash verification in `claw curate` (exact Jaccard of each
# candidate pair's shingle sets): docs/s of a minhash_dedup pipeline with
# and without it, on the corpus of tests/e2e/curate/dedup_precision.py
# (built-in text, planted near duplicates) at a larger size, best of 3 runs
# each, 2 threads; the CPU and its SGEMM roof (`claw info`) beside.
#
#   bench/drivers/bench_dedup_verify.sh [CLAW_BINARY] [ORIGINALS]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
claw=${1:-$here/build/bin/claw}
originals=${2:-5000}
export CLAW_DATA_DIR=${CLAW_DATA_DIR:-$here/data}
grep -m1 "model name" /proc/cpuinfo
"$claw" info 2>/dev/null | grep -E "^(threads|sgemm_2048_gflops):"
/usr/bin/python3 "$here/tests/e2e/curate/dedup_precision.py" "$claw" --originals "$originals" --repeat 3
