#!/usr/bin/env bash
# Data-parallel ranks split into distributed-optimizer instances (data
# centres, --num-distributed-optimizer-instances / --data-centers): the
# hierarchical gradient reduction (reduce-scatter inside an instance,
# all-reduce across) under mpirun.
#
#   train_dc.sh CLAW_BINARY CASE
#
# parity  20 steps on the built-in corpus, single rank vs 4 ranks in 2
#         instances: ZeRO-1, -2 and -3, each bucket's reduction overlapped
#         with backward and the long-haul all-reduce cut into 4-8 KiB chunks
#         over 2-3 communicators: the same per-step losses and validation
#         losses (1e-6 relative) and grad norms (2e-5).
# ckpt    a checkpoint written by the 2-instance run at step 10 (each
#         instance holds every shard; instance 0 alone writes) resumes in the
#         flat layout: steps 11-20 equal the 2-instance run's (1e-6).
# diloco  --diloco-inner-steps 5 on the 2 instances: each trains alone and the
#         outer step makes every replica bitwise equal again (the weight-hash
#         check over all 4 replicas passes at steps 5, 10, 15, 20); step 1's
#         loss equals the synchronous run's (1e-6) and training lowers it.
# refused instances that do not divide the data-parallel ranks, or without a
#         sharded optimizer, and DiLoCo without instances or with a weight-hash
#         or save interval between outer steps, end the job before any work
#         with exit code 1, naming the flag.
set -uo pipefail
claw=$1
case_name=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none)
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
        --micro-batch-size 1 --global-batch-size 8 --train-iters 20 --eval-interval 10 --eval-iters 2
        --lr 2e-3 --lr-warmup-iters 3 --hidden-dropout 0.1 --peak-gflops 100 --num-threads 1)
fail() { echo "FAIL: $*"; exit 1; }
check_layout() {  # LOG FLAGS
  [[ $2 != *instances* && $2 != *data-centers* ]] && return 0
  grep -q "2 distributed-optimizer instances of 2 dp x cp ranks" "$1"
}
# shellcheck source=compare_runs.sh
source "$here/compare_runs.sh"

case $case_name in
parity)
  compare dc -- \
    "4 --use-distributed-optimizer --num-distributed-optimizer-instances 2 --ddp-bucket-size 20000 --overlap-grad-reduce --inter-dc-chunk-bytes 4096 --inter-dc-streams 2" \
    "4 --zero-stage 2 --data-centers 2 --ddp-bucket-size 5000 --overlap-grad-reduce --inter-dc-chunk-bytes 8192 --inter-dc-streams 3" \
    "4 --zero-stage 3 --data-centers 2 --overlap-grad-reduce --overlap-param-gather --inter-dc-chunk-bytes 4096 --inter-dc-streams 2"
  ;;
ckpt)
  timeout 300 "${mpirun[@]}" -np 4 "$claw" train "${common[@]}" --use-distributed-optimizer --data-centers 2 \
    --save "$tmp/ckpt" --save-interval 10 --metrics-file "$tmp/dc.jsonl" >"$tmp/dc.log" 2>&1 ||
    { cat "$tmp/dc.log"; fail "the 2-instance run"; }
  timeout 300 "${mpirun[@]}" -np 4 "$claw" train "${common[@]}" --use-distributed-optimizer \
    --load "$tmp/ckpt" --ckpt-step 10 --metrics-file "$tmp/flat.jsonl" >"$tmp/flat.log" 2>&1 ||
    { cat "$tmp/flat.log"; fail "the flat run resumed from the 2-instance checkpoint"; }
  tail -n 10 "$tmp/dc.jsonl" >"$tmp/dc_last.jsonl"
  /usr/bin/python3 "$here/compare_metrics.py" "$tmp/dc_last.jsonl" "$tmp/flat.jsonl" "resumed_flat" 10 \
    --loss-rtol 1e-6 || exit 1 ;;
diloco)
  "$claw" train "${common[@]}" --metrics-file "$tmp/sync.jsonl" >"$tmp/sync.log" 2>&1 ||
    { cat "$tmp/sync.log"; fail "single-rank run"; }
  timeout 300 "${mpirun[@]}" -np 4 "$claw" train "${common[@]}" --use-distributed-optimizer --data-centers 2 \
    --diloco-inner-steps 5 --check-weight-hash-across-dp-replicas-interval 5 --metrics-file "$tmp/diloco.jsonl" \
    >"$tmp/diloco.log" 2>&1 || { cat "$tmp/diloco.log"; fail "the DiLoCo run"; }
  for step in 5 10 15 20; do
    grep -q "step $step: the parameters of the 4 data-parallel replicas are bitwise equal" "$tmp/diloco.log" ||
      { grep sdc "$tmp/diloco.log"; fail "no weight-hash agreement at step $step"; }
  done
  /usr/bin/python3 - "$tmp/sync.jsonl" "$tmp/diloco.jsonl" <<'PY' || fail "DiLoCo losses"
import json, sys
sync = [json.loads(l) for l in open(sys.argv[1])]
dl = [json.loads(l) for l in open(sys.argv[2])]
assert len(dl) == 20, len(dl)
rel = abs(dl[0]["loss"] - sync[0]["loss"]) / sync[0]["loss"]
assert rel < 1e-6, f"step 1: {dl[0]['loss']} vs {sync[0]['loss']}"
assert dl[-1]["loss"] < dl[0]["loss"] - 1, (dl[0]["loss"], dl[-1]["loss"])
print(f"ok diloco: step 1 loss {dl[0]['loss']:.6f} (synchronous {sync[0]['loss']:.6f}), step 20 {dl[-1]['loss']:.4f} "
      f"(synchronous {sync[-1]['loss']:.4f}); validation {dl[-1].get('val_loss')} vs {sync[-1].get('val_loss')}")
PY
  ;;
refused)
  for run in "--data-centers 3 --use-distributed-optimizer|does not divide data-parallel x context-parallel = 4" \
             "--num-distributed-optimizer-instances 2|needs a distributed optimizer" \
             "--use-distributed-optimizer --diloco-inner-steps 5|needs --data-centers" \
             "--use-distributed-optimizer --data-centers 2 --diloco-inner-steps 5 --check-weight-hash-across-dp-replicas-interval 3|must be a multiple of --diloco-inner-steps 5" \
             "--use-distributed-optimizer --data-centers 2 --diloco-inner-steps 5 --save $tmp/ckpt --save-interval 7|--save-interval 7 must be a multiple"; do
    flags=${run%%|*} want=${run#*|}
    # shellcheck disable=SC2086
    timeout 120 "${mpirun[@]}" -np 4 "$claw" train "${common[@]}" $flags >"$tmp/log" 2>&1
    rc=$?
    [[ $rc -eq 1 ]] || { cat "$tmp/log"; fail "$flags: exit $rc, expected 1 (bad configuration)"; }
    grep -q -- "$want" "$tmp/log" || { cat "$tmp/log"; fail "$flags: the error does not say '$want'"; }
    grep -qE "step +1/" "$tmp/log" && fail "$flags: training started"
    echo "ok: $flags refused: $(grep -m1 -o "error.*" "$tmp/log")"
  done ;;
*) fail "unknown case $case_name" ;;
esac
