#!/usr/bin/env bash
# `claw train` with pipeline parallelism (and 3D layouts) under mpirun.
#
#   train_pp.sh CLAW_BINARY CASE
#
# parity      20 steps on the built-in corpus, single rank vs PP 2 (1F1B and
#             GPipe), PP 4 ZB-H1, PP 2 with an uneven first stage, PP 4 interleaved (one
#             layer per virtual stage), PP 2 x DP 2 with the distributed
#             optimizer, and TP 2 x PP 2 x DP 2 with sequence parallelism on
#             8 ranks: the same per-step losses, grad norms and validation
#             losses (2e-5 relative). gpt2-tiny ties its embeddings, so the
#             first and last stage keep two copies equal.
# bad_layout  layouts refused before any work, naming the flags: layers not
#             divisible among stages or chunks, micro-batches that do not fit
#             the interleaved schedule, an unknown schedule, ZeRO-2 with PP.
set -uo pipefail
claw=$1
case_name=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none)
common=(--model gpt2-tiny --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1
        --global-batch-size 8 --train-iters 20 --eval-interval 10 --eval-iters 2 --lr 2e-3 --lr-warmup-iters 3
        --hidden-dropout 0.1 --peak-gflops 100 --num-threads 1)
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=refused.sh
source "$here/refused.sh"

case $case_name in
parity)
  for layers in 4 8; do
    "$claw" train "${common[@]}" --num-layers $layers --metrics-file "$tmp/l$layers.jsonl" >"$tmp/l$layers.log" 2>&1 ||
      { cat "$tmp/l$layers.log"; fail "single-rank run, $layers layers"; }
  done
  while read -r np layers flags; do
    [[ -z $np ]] && continue
    name="np${np}_l${layers}_$(echo "$flags" | sed 's/--pipeline-model-parallel-size /pp/; s/--tensor-model-parallel-size /tp/; s/--//g' | tr -cd 'a-z0-9_')"
    # shellcheck disable=SC2086
    timeout 300 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" --num-layers "$layers" $flags \
      --metrics-file "$tmp/$name.jsonl" </dev/null >"$tmp/$name.log" 2>&1 ||
      { cat "$tmp/$name.log"; fail "mpirun -np $np claw train --num-layers $layers $flags"; }
    grep -q "pipeline: " "$tmp/$name.log" || { head -5 "$tmp/$name.log"; fail "$name: no pipeline line"; }
    /usr/bin/python3 "$here/compare_metrics.py" "$tmp/l$layers.jsonl" "$tmp/$name.jsonl" "$name" || exit 1
  done <<'RUNS'
2 4 --pipeline-model-parallel-size 2
2 4 --pipeline-model-parallel-size 2 --pipeline-schedule gpipe
4 4 --pipeline-model-parallel-size 4 --pipeline-schedule zb-h1
2 4 --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 1
4 8 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1
4 4 --pipeline-model-parallel-size 2 --use-distributed-optimizer
8 4 --pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer
RUNS
  ;;
bad_layout)
  refused 4 "--num-layers 6 --pipeline-model-parallel-size 4" \
    "--num-layers 6 is not divisible by --pipeline-model-parallel-size 4"
  refused 2 "--num-layers 4 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3" \
    "--num-layers-per-virtual-pipeline-stage 3"
  refused 4 "--num-layers 8 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 6" \
    "--global-batch-size"
  refused 2 "--num-layers 4 --pipeline-model-parallel-size 2 --pipeline-schedule 2f2b" "--pipeline-schedule"
  refused 4 "--num-layers 4 --pipeline-model-parallel-size 2 --zero-stage 2" "--zero-stage 0 or 1"
  refused 2 "--num-layers 4 --decoder-first-pipeline-num-layers 1" "need --pipeline-model-parallel-size > 1" ;;
*)
  fail "unknown case $case_name" ;;
esac
