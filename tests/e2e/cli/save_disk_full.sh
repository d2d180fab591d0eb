#!/usr/bin/env bash
# A save that fails on a full disk costs that checkpoint, not the job: its
# partial files are removed, the failure is logged and in the metrics
# ("ckpt_failed"), and the next save tries again. Only
# max_consecutive_failures (3) failed saves in a row end the job (exit 1),
# leaving no partial files either. (A disk already full is found before
# step 1: cli_save_dir_checks.)
#
# The disk is a small tmpfs mounted in a private mount namespace (unshare
# -m; the script re-runs itself there). The run is paused (SIGSTOP) while
# the test fills the disk after a save and frees it after a failed one.
#   save_disk_full.sh CLAW_BINARY
set -uo pipefail
claw=$1
if [[ -z ${CLAW_IN_MOUNT_NS:-} ]]; then
  unshare -m true 2>/dev/null || { echo "FAIL: unshare -m is not permitted here (the test mounts a tmpfs)"; exit 1; }
  exec unshare -m env CLAW_IN_MOUNT_NS=1 bash "$0" "$@"
fi
tmp=$(mktemp -d)
pid=
trap '[[ -z $pid ]] || kill -9 "$pid" 2>/dev/null; umount "$tmp/disk" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--model gpt2-tiny --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
        --micro-batch-size 2 --global-batch-size 2 --eval-interval 1000 --eval-iters 1 --lr 2e-3
        --num-threads 1 --peak-gflops 100 --log-interval 1)
wait_for() {  # CONDITION...: polls every 20 ms for up to 60 s
  for _ in $(seq 3000); do
    "$@" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.02
  done
  return 1
}
fill() { dd if=/dev/zero of="$tmp/disk/filler" bs=64k 2>/dev/null; true; }

# A checkpoint's size, for a disk that holds two of them and a little more.
"$claw" train "${common[@]}" --train-iters 1 --save "$tmp/sized" >"$tmp/sized.log" 2>&1 || { cat "$tmp/sized.log"; fail "sizing"; }
kib=$(du -sk "$tmp/sized/iter_0000001" | cut -f1)
mkdir -p "$tmp/disk"
mount -t tmpfs -o size=$((kib * 2 + kib / 2))k tmpfs "$tmp/disk" || fail "mount a tmpfs"
echo "checkpoint $kib KiB; tmpfs $((kib * 2 + kib / 2)) KiB"

# 1. Full at iteration 20, freed before 30: one checkpoint lost, the run completes.
"$claw" train "${common[@]}" --train-iters 40 --save "$tmp/disk/ckpt" --save-interval 10 --keep-last-checkpoints 1 \
  --metrics-file "$tmp/m.jsonl" >"$tmp/run.log" 2>&1 &
pid=$!
wait_for test -d "$tmp/disk/ckpt/iter_0000010" || { cat "$tmp/run.log"; fail "no checkpoint 10"; }
kill -STOP "$pid"
fill
kill -CONT "$pid"
wait_for grep -q "checkpoint .*iter_0000020 not saved" "$tmp/run.log" || { cat "$tmp/run.log"; fail "no failure logged"; }
kill -STOP "$pid"
rm -f "$tmp/disk/filler"
kill -CONT "$pid"
wait "$pid"
code=$?
pid=
[[ $code == 0 ]] || { tail -20 "$tmp/run.log"; fail "the run ended with $code after one failed save"; }
grep "not saved" "$tmp/run.log"
[[ $(cat "$tmp/disk/ckpt/latest_checkpointed_iteration.txt") == 40 ]] || fail "the last checkpoint is not 40"
! ls -d "$tmp"/disk/ckpt/*.partial 2>/dev/null || fail "partial files left"
/usr/bin/python3 - "$tmp/m.jsonl" <<'PY' || fail "metrics"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
failed = [r["step"] for r in recs if "ckpt_failed" in r]
committed = sorted(r["ckpt_committed"] for r in recs if "ckpt_committed" in r)
print(f"failed saves at steps {failed}, committed {committed}")
assert failed == [20] and committed == [10, 30, 40], (failed, committed)
PY
echo "ok: the full disk cost checkpoint 20; 30 and 40 saved, the run completed"

# 2. A disk that fills for good after the save of iteration 5: the saves of
# 10, 15 and 20 fail and end the job, cleanly.
rm -rf "$tmp/disk/ckpt" "$tmp/disk/filler"
"$claw" train "${common[@]}" --train-iters 100 --save "$tmp/disk/ckpt2" --save-interval 5 >"$tmp/full.log" 2>&1 &
pid=$!
wait_for test -d "$tmp/disk/ckpt2/iter_0000005" || { cat "$tmp/full.log"; fail "no checkpoint 5"; }
kill -STOP "$pid"
fill
kill -CONT "$pid"
wait "$pid"
code=$?
pid=
[[ $code == 1 ]] || { tail -20 "$tmp/full.log"; fail "a disk that stays full: exit code $code, expected 1"; }
grep -q "iter_0000020 not saved: .*3 saves in a row have failed, stopping" "$tmp/full.log" ||
  { tail -20 "$tmp/full.log"; fail "the stop does not say why"; }
! ls -d "$tmp"/disk/ckpt2/*.partial 2>/dev/null || fail "partial files left after the job ended"
echo "ok: $(grep -o "checkpoint .*stopping" "$tmp/full.log")"
echo "PASS"
