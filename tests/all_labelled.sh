#!/usr/bin/env bash
# Every ctest test carries exactly one tier label (unit, mpi, oracle, slow,
# sanitize; cuda for the GPU tests of a build with the CUDA backend):
# none would leave it out of every tier, two would run it twice in CI's tiers.
# Usage: all_labelled.sh CTEST BUILD_DIR
set -euo pipefail
ctest=$1 dir=$2
# -FA: a tier's count leaves out the fixtures its tests pull in from other tiers.
count() { "$ctest" --test-dir "$dir" -N -FA '.*' "$@" | sed -n 's/^Total Tests: //p'; }
total=$(count)
unlabelled=$("$ctest" --test-dir "$dir" -N -LE '^(unit|mpi|oracle|slow|sanitize|cuda)$' | sed -n 's/^ *Test *#[0-9]*: //p')
if [[ -n $unlabelled ]]; then
  echo "tests without a tier label (add LABELS unit|mpi|oracle|slow|sanitize where they are registered):"
  echo "$unlabelled"
  exit 1
fi
sum=0
for tier in unit mpi oracle slow sanitize cuda; do
  n=$(count -L "^${tier}\$")
  echo "$tier: $n"
  sum=$((sum + n))
done
echo "total: $total"
if ((sum != total)); then
  echo "the tiers hold $sum tests but ctest lists $total: some test has more than one tier label"
  exit 1
fi
