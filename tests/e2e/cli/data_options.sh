#!/usr/bin/env bash
# Data options end to end: a weighted blend on --data-path, sequence packing
# flags, and the sample-index cache (built on the first run in
# --data-cache-path, loaded by the second).
#   data_options.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
prefix=${CLAW_DATA_DIR:?}/sotu_gpt2_text_document
"$claw" train --train-iters 0 >/dev/null 2>&1 || true  # builds the built-in corpus if needed
args=(--model llama-tiny --num-layers 2 --seq-length 128 --micro-batch-size 4 --train-iters 8 --eval-interval 4
      --eval-iters 1 --lr 2e-3 --lr-warmup-iters 2 --num-threads 2 --split 90,10
      --data-path 0.3 "$prefix" 0.7 "$prefix" --data-cache-path "$tmp/cache"
      --reset-position-ids --reset-attention-mask --eod-mask-loss)
"$claw" train "${args[@]}" --metrics-file "$tmp/a.jsonl" >"$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; exit 1; }
grep -q "packing: reset-position-ids=true reset-attention-mask=true eod-mask-loss=true, eod 50256" "$tmp/a.log" ||
  { echo "FAIL: packing options not in effect"; cat "$tmp/a.log"; exit 1; }
grep -q "indices built and cached in $tmp/cache/" "$tmp/a.log" || { echo "FAIL: no index cache built"; exit 1; }
ls "$tmp"/cache/*-GPTDataset-train-shuffle_index.npy >/dev/null

"$claw" train "${args[@]}" --metrics-file "$tmp/b.jsonl" >"$tmp/b.log" 2>&1 || { cat "$tmp/b.log"; exit 1; }
grep -q "indices loaded from $tmp/cache/" "$tmp/b.log" || { echo "FAIL: second run did not load the cache"; exit 1; }
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
a = [json.loads(l) for l in open(f"{d}/a.jsonl")]
b = [json.loads(l) for l in open(f"{d}/b.jsonl")]
assert [r["loss"] for r in a] == [r["loss"] for r in b], "cached indices gave another run"
assert a[-1]["loss"] < a[0]["loss"] - 0.5, f"loss did not fall: {a[0]['loss']} -> {a[-1]['loss']}"
print(f"blend + packing: loss {a[0]['loss']:.3f} -> {a[-1]['loss']:.3f}, identical from the cache")
PY
