#!/usr/bin/env bash
# Elastic restart across hosts that are network namespaces (run as root):
# four hosts of two rank slots each, joined by a bridge; an 8-rank TP2 x DP4
# job under `claw launch --min-ranks 6`, checkpoints every 5 steps.
#   lost  host 3 is lost (its link down, its processes killed) after step 7
#   sdc   host 3 corrupts data: from step 7 its ranks' gradients get a
#         flipped bit (re-runs off); the replicas' weight hash at step 10
#         names its ranks, the job ends (exit 5) naming the host, and the
#         supervisor leaves the host out
# Either way the supervisor probes the hosts, leaves host 3 out, and the job
# resumes from its last checkpoint on the 6 ranks that remain, in the layout
# the planner chooses; its losses match the uninterrupted 8-rank run's within
# the resharding tolerance of the checkpoint tests (1e-6 relative).
#   elastic.sh CLAW_BINARY lost|sdc    (KEEP=1: leave the namespaces and files for a look)
set -uo pipefail
claw=$1
mode=${2:-lost}
tmp=$(mktemp -d /tmp/claw_elastic.XXXXXX)
P=ce$$x  # namespace prefix, unique to this test run (host names allow no underscore)
hosts=4
cleanup() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$P"); do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [[ -z $pids ]] || kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
[[ -n ${KEEP:-} ]] && trap - EXIT
fail() { echo "FAIL: $*"; [[ -f $tmp/launch.log ]] && grep -v "^  " "$tmp/launch.log" | tail -n 30; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CLAW_NS_PREFIX=$P

# The hosts: PREFIXh1..4 with eth0 10.77.0.K/24 on a bridge in PREFIXsw.
ip netns add "${P}sw" || fail "cannot create network namespaces (this test runs as root)"
ip netns exec "${P}sw" ip link add br0 type bridge
ip netns exec "${P}sw" ip link set br0 up
for k in $(seq $hosts); do
  ip netns add "${P}h$k"
  ip link add eth0 netns "${P}h$k" type veth peer name v$k netns "${P}sw"
  ip netns exec "${P}sw" ip link set v$k master br0
  ip netns exec "${P}sw" ip link set v$k up
  ip netns exec "${P}h$k" ip addr add 10.77.0.$k/24 dev eth0
  ip netns exec "${P}h$k" ip link set eth0 up
  ip netns exec "${P}h$k" ip link set lo up
  echo "10.77.0.$k slots=2" >>"$tmp/hosts"
done

iters=15
job=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
     --micro-batch-size 1 --global-batch-size 12 --train-iters $iters --lr-decay-iters $iters --eval-interval 1000
     --eval-iters 1 --lr 2e-3 --lr-warmup-iters 2 --num-threads 1 --peak-gflops 100 --log-interval 1
     --straggler-report-interval 0)

# The uninterrupted run: the same 8 ranks on this host.
mpirun --oversubscribe --bind-to none -np 8 "$claw" train "${job[@]}" --tensor-model-parallel-size 2 \
  --metrics-file "$tmp/full.jsonl" >"$tmp/full.log" 2>&1 || { tail -n 20 "$tmp/full.log"; fail "the uninterrupted run"; }

mpi="--mca plm_rsh_agent $(cd "$(dirname "$0")/../net" && pwd)/ns_agent.sh --mca btl self,vader,tcp --mca btl_tcp_if_include eth0"
mpi+=" --mca oob_tcp_if_include eth0 --oversubscribe --bind-to none"
mpi+=" -x CLAW_NS_PREFIX -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"
faults=()
[[ $mode == sdc ]] && faults=(--rerun-mode disabled --check-weight-hash-across-dp-replicas-interval 5
                              --test-fault "bit-flip:@${P}h3:7")
ip netns exec "${P}h1" unshare --uts sh -c 'hostname "$0"; exec "$@"' "${P}h1" \
  "$claw" launch --hostfile "$tmp/hosts" --nproc 8 --min-ranks 6 --supervisor-host 10.77.0.1 \
  --host-probe-timeout 15 --launcher-args "$mpi" --events-file "$tmp/events.jsonl" -- \
  train "${job[@]}" --tensor-model-parallel-size 2 --save "$tmp/ckpt" --save-interval 5 \
  --metrics-file "$tmp/metrics.jsonl" "${faults[@]}" >"$tmp/launch.log" 2>&1 &
sup=$!
if [[ $mode == lost ]]; then
  for _ in $(seq 3000); do
    [[ -f $tmp/metrics.jsonl && $(wc -l <"$tmp/metrics.jsonl") -ge 7 ]] && break
    kill -0 $sup 2>/dev/null || fail "the supervised job ended before step 7"
    sleep 0.1
  done
  # Host 3 is lost: its link goes down and its processes die.
  ip netns exec "${P}h3" ip link set eth0 down
  pids=$(ip netns pids "${P}h3")
  [[ -n $pids ]] || fail "no processes on host 3"
  kill -9 $pids
  echo "host 3 lost after step $(wc -l <"$tmp/metrics.jsonl")"
fi
wait $sup
code=$?
[[ $code == 0 ]] || fail "claw launch exited $code"
if [[ $mode == lost ]]; then
  grep -q "host(s) gone: 10.77.0.3 (" "$tmp/launch.log" || fail "the lost host is not named"
else
  grep -q "step 10: silent data corruption: the parameters of world rank 4 (host ${P}h3, pid [0-9]*) differ from the other 3 replicas'" \
    "$tmp/launch.log" || fail "the corrupting rank is not named"
  grep -q "host(s) gone: 10.77.0.3 (host name ${P}h3: the job named it in a silent data corruption)" "$tmp/launch.log" ||
    fail "the suspect host is not left out"
  grep -q "attempt 2 resuming from iteration 5" "$tmp/launch.log" || fail "not resumed from the checkpoint before the fault"
fi
grep -q "the job goes on with 6 rank(s) on 3 host(s)" "$tmp/launch.log" || fail "the job did not shrink to 6 ranks"
layout=$(grep -o "\-\-parallel auto: [^;]* of [0-9]* layouts" "$tmp/launch.log" | head -n 1)
[[ -n $layout ]] || fail "the planner did not choose the layout"
grep -q "ckpt: loaded .*saved at {\"dp\":4,\"pp\":1,\"sequence_parallel\":false,\"tp\":2,\"world_size\":8" "$tmp/launch.log" ||
  fail "the 8-rank checkpoint was not loaded"
/usr/bin/python3 - "$tmp/full.jsonl" "$tmp/metrics.jsonl" "$iters" <<'PY' || fail "the resumed losses differ"
import json, sys
full = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
got = [json.loads(l) for l in open(sys.argv[2])]
last = int(sys.argv[3])
assert got[-1]["step"] == last, f"the resumed run ends at step {got[-1]['step']}"
worst = 0.0
for r in got:
    rel = abs(r["loss"] - full[r["step"]]["loss"]) / abs(full[r["step"]]["loss"])
    worst = max(worst, rel)
    assert rel <= 1e-6, f"step {r['step']}: loss {r['loss']} vs {full[r['step']]['loss']} ({rel:.2e})"
print(f"ok: steps {got[0]['step']}-{last} on 6 ranks match the 8-rank run (worst {worst:.1e} relative)")
PY
echo "ok: $layout"
echo "PASS"
