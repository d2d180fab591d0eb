#!/usr/bin/env bash
# --tensorboard-dir end to end: a short gpt2-tiny run's event file, read back
# with TensorBoard's own EventAccumulator (PyPI `tensorboard`, in a venv under
# /tmp made on first use), holds every step's scalars with the JSONL's values;
# an unwritable directory is a one-line error before training.
#   tensorboard.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1

py=$("$(dirname "$0")/../../oracle_env.sh" tensorboard)

"$claw" train --model gpt2-tiny --num-layers 2 --seq-length 64 --micro-batch-size 4 --global-batch-size 8 \
  --train-iters 6 --eval-interval 3 --eval-iters 1 --lr 2e-3 --lr-warmup-iters 2 --num-threads 2 \
  --peak-gflops 100 --metrics-file "$tmp/m.jsonl" --tensorboard-dir "$tmp/tb" >"$tmp/log" 2>&1 ||
  { cat "$tmp/log"; exit 1; }

"$py" - "$tmp/m.jsonl" "$tmp/tb" <<'PY'
import glob, json, math, os, sys
from tensorboard.backend.event_processing import event_accumulator

recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 6, f"{len(recs)} metric records, expected 6"
files = glob.glob(os.path.join(sys.argv[2], "events.out.tfevents.*"))
assert len(files) == 1, f"expected one event file, found {files}"
acc = event_accumulator.EventAccumulator(sys.argv[2], size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
assert acc.file_version == 2.0, f"file_version {acc.file_version}"  # from the "brain.Event:2" event
tags = {"lm loss": "loss", "lm loss validation": "val_loss", "learning-rate": "lr", "grad-norm": "grad_norm",
        "throughput/tokens_per_s": "tokens_per_s", "mfu": "mfu", "mem-max-allocated-bytes": "mem_bytes"}
assert set(acc.Tags()["scalars"]) == set(tags), f"scalar tags {acc.Tags()['scalars']}"
for tag, key in tags.items():
    want = {r["step"]: r[key] for r in recs if key in r}
    got = {e.step: e.value for e in acc.Scalars(tag)}
    assert got.keys() == want.keys(), f"{tag}: steps {sorted(got)} != JSONL's {sorted(want)}"
    for step, v in want.items():
        # Events store float32: equal after rounding to float32 (2^-24 relative).
        assert math.isclose(got[step], v, rel_tol=1e-6), f"{tag} step {step}: {got[step]} != {v}"
assert sorted(s.step for s in acc.Scalars("lm loss validation")) == [3, 6]
print(f"{len(tags)} tags x {len(recs)} steps match the JSONL")
PY

# A directory that cannot be made: one line naming the flag, no training.
touch "$tmp/file"
if "$claw" train --model gpt2-tiny --num-layers 2 --seq-length 64 --micro-batch-size 4 --train-iters 2 \
  --num-threads 2 --peak-gflops 100 --tensorboard-dir "$tmp/file/tb" >"$tmp/bad" 2>&1; then
  echo "FAIL: an unwritable --tensorboard-dir was accepted"; exit 1
fi
grep -q -- "--tensorboard-dir $tmp/file/tb" "$tmp/bad" || { echo "FAIL: error does not name the flag"; cat "$tmp/bad"; exit 1; }
if grep -q "step 1/" "$tmp/bad"; then echo "FAIL: training started before the error"; exit 1; fi
echo "PASS"
