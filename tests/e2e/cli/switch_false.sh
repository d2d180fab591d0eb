#!/usr/bin/env bash
# A switch given =false turns off what the --model preset turned on:
# llama-tiny has --disable-bias-linear and --untie-embeddings-and-output-weights;
# `=false` must reach the configuration the run prints (it was once ignored).
. "$(dirname "$0")/../../lib.sh"
claw=$1
out=$("$claw" train --model llama-tiny --disable-bias-linear=false --untie-embeddings-and-output-weights=false \
  --train-iters 0 2>&1) || { echo "$out"; fail "claw train refused the switches given =false"; }
for flag in disable-bias-linear untie-embeddings-and-output-weights; do
  grep -Eq "^ +$flag +false$" <<<"$out" || { echo "$out" | grep -- "$flag"; fail "--$flag=false did not apply"; }
done
out=$("$claw" train --model gpt2-tiny --untie-embeddings-and-output-weights=true --train-iters 0 2>&1)
grep -Eq "^ +untie-embeddings-and-output-weights +true$" <<<"$out" || fail "--untie-embeddings-and-output-weights=true did not apply"
echo "switches given =false and =true apply"
