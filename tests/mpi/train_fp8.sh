#!/usr/bin/env bash
# `claw train` with FP8 linear layers under mpirun: each layout against the
# single-rank run of the same recipe.
#
#   train_fp8.sh CLAW_BINARY RECIPE     RECIPE: delayed | tensorwise | mxfp8
#
# 20 steps of a small gpt2-tiny (hybrid format: E4M3 forward, E5M2
# gradients; delayed with a 4-step history, max algorithm) at TP 2, TP 2 +
# SP, PP 2 and DP 2 with the distributed optimizer (ZeRO-1). Every layout
# quantises the same values with the same scales (delayed: the step's amaxes
# are reduced over tp x cp and dp before they enter the history;
# tensorwise: each tensor's amax over the ranks holding its parts; mxfp8:
# blocks of 32 never straddle a TP split), so what differs is the fp32
# GEMMs' summation order, and through it an FP8 rounding flipped now and
# then where a value lies within a rounding error of a midpoint between two
# E4M3 values (one E4M3 step is 1/8 relative). Tolerance: per-step losses
# 2e-5 relative, grad norms 2e-3 relative (fp32 layouts: 1e-6 and 2e-5).
set -uo pipefail
claw=$1
recipe=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none)
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
        --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --eval-interval 10 --eval-iters 2 --lr 2e-3
        --lr-warmup-iters 3 --peak-gflops 100 --num-threads 1
        --fp8-format hybrid --fp8-recipe "$recipe" --fp8-amax-history-len 4 --fp8-amax-compute-algo max)
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=compare_runs.sh
source "$here/compare_runs.sh"
check_layout() { grep -q "fp8" "$1"; }
loss_rtol=2e-5 grad_rtol=2e-3
compare "fp8_$recipe" -- \
  "2 --tensor-model-parallel-size 2" "2 --tensor-model-parallel-size 2 --sequence-parallel" \
  "2 --pipeline-model-parallel-size 2" "2 --use-distributed-optimizer"
echo "PASS: $recipe FP8 at TP 2, TP 2 + SP, PP 2 and DP 2 + ZeRO-1 equals one rank"
