#!/usr/bin/env bash
# `claw train` with pipeline parallelism (and 3D layouts) under mpirun.
#
#   train_pp.sh CLAW_BINARY CASE
#
# parity      single rank vs PP 2 (1F1B, 20 steps), and for 4 steps each
#             PP 4 ZB-H1, PP 2 with an uneven first stage, PP 4 interleaved
#             (one layer per virtual stage) and TP 2 x PP 2 x DP 2 with
#             sequence parallelism and the distributed optimizer on 8 ranks:
#             the same per-step losses, grad norms and validation losses
#             (2e-5 relative). gpt2-tiny ties its embeddings, so the first and
#             last stage keep two copies equal. Every schedule at PP 2 and 4
#             over 20 steps is test_pipeline_parallel's (gtest).
# mutation    the first activation sent at step 2 loses its last row
#             (--test-fault drop-pp-row:2) at PP 2: the 4-step comparison
#             must fail.
# bad_layout  layouts refused before any work, naming the flags: layers not
#             divisible among stages or chunks, micro-batches that do not fit
#             the interleaved schedule, an unknown schedule, ZeRO-2 with PP.
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2
# shellcheck source=models.sh
source "$here/models.sh"
# shellcheck source=compare_runs.sh
source "$here/compare_runs.sh"
# shellcheck source=refused.sh
source "$here/refused.sh"
common=("${mpi_common[@]}" "${gpt[@]}")
loss_rtol=2e-5
check_layout() { grep -q "pipeline: " "$1"; }

case $case_name in
parity)
  compare gpt_l4 --num-layers 4 -- "2 --pipeline-model-parallel-size 2" \
    "4:$short --pipeline-model-parallel-size 4 --pipeline-schedule zb-h1" \
    "2:$short --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 1" \
    "8:$short --pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer"
  compare gpt_l8 --num-layers 8 -- "4:$short --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1" ;;
mutation)
  caught gpt_l4 drop-pp-row:2 --num-layers 4 -- "2:$short --pipeline-model-parallel-size 2" ;;
bad_layout)
  refused 4 "--num-layers 6 --pipeline-model-parallel-size 4" \
    "--num-layers 6 is not divisible by --pipeline-model-parallel-size 4"
  refused 2 "--num-layers 4 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3" \
    "--num-layers-per-virtual-pipeline-stage 3"
  refused 4 "--num-layers 8 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 6" \
    "--global-batch-size"
  refused 2 "--num-layers 4 --pipeline-model-parallel-size 2 --pipeline-schedule 2f2b" "--pipeline-schedule"
  refused 4 "--num-layers 4 --pipeline-model-parallel-size 2 --zero-stage 2" "--zero-stage 0 or 1"
  refused 2 "--num-layers 4 --decoder-first-pipeline-num-layers 1" "need --pipeline-model-parallel-size > 1"
  refusals_checked || exit 1 ;;
*)
  fail "unknown case $case_name" ;;
esac
