"""Compares two claw metrics files (JSONL) step by step.

    compare_metrics.py REFERENCE GOT NAME [STEPS]

Loss, grad norm and validation loss must agree to 2e-5 relative; GOT must
hold exactly STEPS records (default 20: metrics are written once, by rank 0),
with a consistent per-rank step-time spread.
"""
import json
import sys

ref = [json.loads(line) for line in open(sys.argv[1])]
got = [json.loads(line) for line in open(sys.argv[2])]
name = sys.argv[3]
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 20
assert len(got) == len(ref) == steps, f"{name}: {len(got)} records (metrics must be written once, by rank 0)"
worst = 0.0
for a, b in zip(ref, got):
    for k in ("loss", "grad_norm", "val_loss"):
        if k in a:
            d = abs(a[k] - b[k]) / abs(a[k])
            worst = max(worst, d)
            assert d <= 2e-5, f"{name} step {a['step']}: {k} {b[k]} vs single rank {a[k]}"
    assert b["step_ms_min"] <= b["step_ms"] and b["step_ms_min"] <= b["step_ms_max"], b
print(f"ok {name}: {steps} steps, worst relative difference {worst:.1e} (loss {got[-1]['loss']:.4f})")
