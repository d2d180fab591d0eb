#!/usr/bin/env bash
# The model the serving tests generate from: gpt2-tiny (2 layers) trained
# 200 steps of 8 x 64 tokens on the built-in corpus, enough for quantization
# to move its perplexity measurably (quant_cli.sh). ctest makes it once per
# suite in the fixture serve_model (tests/CMakeLists.txt); the tests that
# need it are given its directory, and train it themselves into their own
# temporary directory when run without one.
#
#   model_fixture.sh CLAW_BINARY DIR    (DIR is replaced, and written whole)
set -euo pipefail
claw=$1 dir=$2
rm -rf "$dir" "$dir.part"
mkdir -p "$(dirname "$dir")"
"$claw" train --model gpt2-tiny --num-layers 2 --seq-length 64 --micro-batch-size 8 --global-batch-size 8 \
  --train-iters 200 --lr 2e-3 --eval-interval 0 --num-threads 2 --peak-gflops 100 --save "$dir.part" \
  >"$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
mv "$dir.part" "$dir"
grep "step 200/200" "$dir.log"
