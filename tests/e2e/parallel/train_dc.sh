#!/usr/bin/env bash
# Data-parallel ranks split into distributed-optimizer instances (data
# centres, --num-distributed-optimizer-instances / --data-centers): the
# hierarchical gradient reduction (reduce-scatter inside an instance,
# all-reduce across) under mpirun.
#
#   train_dc.sh CLAW_BINARY CASE
#
# parity  single rank vs 4 ranks in 2 instances: ZeRO-1 (20 steps), -2 and -3
#         (4 steps each), each bucket's reduction overlapped with backward
#         and the long-haul all-reduce cut into 4-8 KiB chunks over 2-3
#         communicators: the same per-step losses and validation losses
#         (1e-6 relative) and grad norms (2e-5).
# ckpt    a checkpoint written by the 2-instance run at step 3 (each
#         instance holds every shard; instance 0 alone writes) resumes in the
#         flat layout: steps 4-6 equal the 2-instance run's (1e-6).
# diloco  --diloco-inner-steps 5 on the 2 instances: each trains alone and the
#         outer step makes every replica bitwise equal again (the weight-hash
#         check over all 4 replicas passes at steps 5, 10, 15, 20); step 1's
#         loss equals the synchronous run's (1e-6) and training lowers it.
# diloco_packed
#         --diloco-delta-bits 8 and 4: the packed deltas are all-gathered and
#         summed in instance order on every rank, so the replicas are bitwise
#         equal after each outer step; step 1 equals the synchronous run and
#         step 20's loss is within 2% of the fp32-delta run's.
# diloco_resume
#         a DiLoCo run saved at step 10 resumes on steps 11-20 bit for bit:
#         fp32 deltas (the outer momentum, non-zero after two outer steps, is
#         in the checkpoint: without it step 15's outer step would differ),
#         and 2 streamed fragments with 4-bit deltas at ZeRO-2 (the save runs
#         the outer step of the fragment not yet synchronised, so instance 0's
#         values are every instance's).
# refused instances that do not divide the data-parallel ranks, or without a
#         sharded optimizer, and DiLoCo without instances or with a weight-hash
#         or save interval between outer steps, end the job before any work
#         with exit code 1, naming the flag.
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2
# shellcheck source=models.sh
source "$here/models.sh"
common=("${mpi_common[@]}" "${gpt[@]}")
check_layout() {  # LOG FLAGS
  [[ $2 != *instances* && $2 != *data-centers* ]] && return 0
  grep -q "2 distributed-optimizer instances of 2 dp x cp ranks" "$1"
}
# shellcheck source=compare_runs.sh
source "$here/compare_runs.sh"
# shellcheck source=refused.sh
source "$here/refused.sh"

case $case_name in
parity)
  compare gpt -- \
    "4 --use-distributed-optimizer --num-distributed-optimizer-instances 2 --ddp-bucket-size 20000 --overlap-grad-reduce --inter-dc-chunk-bytes 4096 --inter-dc-streams 2" \
    "4:4 --zero-stage 2 --data-centers 2 --ddp-bucket-size 5000 --overlap-grad-reduce --inter-dc-chunk-bytes 8192 --inter-dc-streams 3" \
    "4:4 --zero-stage 3 --data-centers 2 --overlap-grad-reduce --overlap-param-gather --inter-dc-chunk-bytes 4096 --inter-dc-streams 2"
  ;;
ckpt)
  timeout 300 "${mpirun[@]}" -np 4 "$claw" train "${common[@]}" --use-distributed-optimizer --data-centers 2 \
    --save "$tmp/ckpt" --save-interval 3 --exit-interval 6 --metrics-file "$tmp/dc.jsonl" >"$tmp/dc.log" 2>&1 ||
    { cat "$tmp/dc.log"; fail "the 2-instance run"; }
  timeout 300 "${mpirun[@]}" -np 4 "$claw" train "${common[@]}" --use-distributed-optimizer \
    --load "$tmp/ckpt" --ckpt-step 3 --exit-interval 6 --metrics-file "$tmp/flat.jsonl" >"$tmp/flat.log" 2>&1 ||
    { cat "$tmp/flat.log"; fail "the flat run resumed from the 2-instance checkpoint"; }
  tail -n 3 "$tmp/dc.jsonl" >"$tmp/dc_last.jsonl"
  /usr/bin/python3 "$here/compare_metrics.py" "$tmp/dc_last.jsonl" "$tmp/flat.jsonl" "resumed_flat" 3 \
    --loss-rtol 1e-6 || exit 1 ;;
diloco)
  reference sync "${common[@]}"
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
diloco_packed)
  "$claw" train "${common[@]}" --train-iters 1 --metrics-file "$tmp/sync.jsonl" >"$tmp/sync.log" 2>&1 ||
    { cat "$tmp/sync.log"; fail "single-rank run"; }
  for bits in 32 8 4; do
    timeout 300 "${mpirun[@]}" -np 4 "$claw" train "${common[@]}" --use-distributed-optimizer --data-centers 2 \
      --diloco-inner-steps 5 --diloco-delta-bits $bits --check-weight-hash-across-dp-replicas-interval 5 \
      --metrics-file "$tmp/d$bits.jsonl" >"$tmp/d$bits.log" 2>&1 || { cat "$tmp/d$bits.log"; fail "DiLoCo with $bits-bit deltas"; }
    for step in 5 10 15 20; do
      grep -q "step $step: the parameters of the 4 data-parallel replicas are bitwise equal" "$tmp/d$bits.log" ||
        { grep sdc "$tmp/d$bits.log"; fail "$bits-bit deltas: no weight-hash agreement at step $step"; }
    done
  done
  /usr/bin/python3 - "$tmp/sync.jsonl" "$tmp/d32.jsonl" "$tmp/d8.jsonl" "$tmp/d4.jsonl" <<'PY' || fail "packed-delta losses"
import json, sys
sync, d32, d8, d4 = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
for name, d in (("8-bit", d8), ("4-bit", d4)):
    assert len(d) == 20, len(d)
    rel = abs(d[0]["loss"] - sync[0]["loss"]) / sync[0]["loss"]
    assert rel < 1e-6, f"{name} step 1: {d[0]['loss']} vs {sync[0]['loss']}"
    assert d[5]["loss"] != d32[5]["loss"], f"{name}: step 6 equals the fp32-delta run's: the deltas were not packed"
    end = abs(d[-1]["loss"] - d32[-1]["loss"]) / d32[-1]["loss"]
    assert end < 0.02, f"{name} step 20 loss {d[-1]['loss']} vs fp32 deltas {d32[-1]['loss']}"
    print(f"ok {name} deltas: step 20 loss {d[-1]['loss']:.4f} (fp32 deltas {d32[-1]['loss']:.4f}, {100 * end:.2f}% apart)")
PY
  ;;
diloco_resume)
  for run in "fp32|--use-distributed-optimizer" \
             "frag|--zero-stage 2 --diloco-fragments 2 --diloco-delta-bits 4"; do
    name=${run%%|*} flags=${run#*|}
    # shellcheck disable=SC2086
    timeout 300 "${mpirun[@]}" -np 4 "$claw" train "${common[@]}" $flags --data-centers 2 --diloco-inner-steps 5 \
      --save "$tmp/$name" --save-interval 10 --metrics-file "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 ||
      { cat "$tmp/$name.log"; fail "$name: the DiLoCo run"; }
    # shellcheck disable=SC2086
    timeout 300 "${mpirun[@]}" -np 4 "$claw" train "${common[@]}" $flags --data-centers 2 --diloco-inner-steps 5 \
      --load "$tmp/$name" --ckpt-step 10 --metrics-file "$tmp/${name}_resumed.jsonl" >"$tmp/${name}_resumed.log" 2>&1 ||
      { cat "$tmp/${name}_resumed.log"; fail "$name: the resumed run"; }
    grep -q "no DiLoCo outer momentum" "$tmp/${name}_resumed.log" && fail "$name: the checkpoint lost the outer momentum"
    "$claw" ckpt inspect "$tmp/$name" --ckpt-step 10 --tensors >"$tmp/inspect.txt" || fail "$name: ckpt inspect"
    grep -q "optim.diloco_momentum" "$tmp/inspect.txt" || fail "$name: no optim.diloco_momentum tensors in the checkpoint"
    /usr/bin/python3 "$here/../cli/resumed_equal.py" "$tmp/$name.jsonl" "$tmp/${name}_resumed.jsonl" 11 20 loss grad_norm ||
      { cat "$tmp/${name}_resumed.log"; fail "$name: the resumed run differs"; }
  done ;;
refused)
  for run in "--data-centers 3 --use-distributed-optimizer|does not divide data-parallel x context-parallel = 4" \
             "--num-distributed-optimizer-instances 2|needs a distributed optimizer" \
             "--use-distributed-optimizer --diloco-inner-steps 5|needs --data-centers" \
             "--use-distributed-optimizer --data-centers 2 --diloco-inner-steps 5 --check-weight-hash-across-dp-replicas-interval 3|must be a multiple of --diloco-inner-steps 5" \
             "--use-distributed-optimizer --data-centers 2 --diloco-inner-steps 5 --save $tmp/ckpt --save-interval 7|--save-interval 7 must be a multiple" \
             "--use-distributed-optimizer --data-centers 2 --diloco-inner-steps 5 --diloco-delta-bits 6|--diloco-delta-bits 6 must be 32" \
             "--use-distributed-optimizer --data-centers 2 --diloco-inner-steps 5 --diloco-fragments 6|--diloco-fragments 6 must be at most --diloco-inner-steps 5" \
             "--use-distributed-optimizer --data-centers 2 --diloco-delta-bits 8|need --diloco-inner-steps" \
             "--use-distributed-optimizer --data-centers 2 --diloco-inner-steps 5 --diloco-fragments 2 --check-weight-hash-across-dp-replicas-interval 5|with --diloco-fragments 2"; do
    refused 4 "${run%%|*}" "${run#*|}" 1  # exit 1: bad configuration
  done
  refusals_checked || exit 1 ;;
*) fail "unknown case $case_name" ;;
esac
