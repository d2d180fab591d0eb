"""Compares two claw metrics files (JSONL) step by step.

    compare_metrics.py REFERENCE GOT NAME [STEPS] [--loss-rtol R] [--grad-rtol G]

Loss, grad norm and validation loss must agree to 2e-5 relative (the loss
and validation loss to R with --loss-rtol, the grad norm to G with
--grad-rtol); GOT must hold exactly STEPS records (default 20: metrics are
written once, by rank 0), with a consistent per-rank step-time spread, and
they are compared with REFERENCE's first STEPS records (a shortened run,
--exit-interval STEPS, against the whole reference run).
"""
import json
import sys

args = sys.argv[1:]
loss_rtol = 2e-5
if "--loss-rtol" in args:
    i = args.index("--loss-rtol")
    loss_rtol = float(args[i + 1])
    del args[i:i + 2]
grad_rtol = 2e-5
if "--grad-rtol" in args:
    i = args.index("--grad-rtol")
    grad_rtol = float(args[i + 1])
    del args[i:i + 2]
ref = [json.loads(line) for line in open(args[0])]
got = [json.loads(line) for line in open(args[1])]
name = args[2]
steps = int(args[3]) if len(args) > 3 else 20
assert len(got) == steps, f"{name}: {len(got)} records, want {steps} (metrics must be written once, by rank 0)"
assert len(ref) >= steps, f"{name}: the reference has {len(ref)} records, fewer than {steps}"
assert [r["step"] for r in got] == [r["step"] for r in ref[:steps]], f"{name}: steps {[r['step'] for r in got]}"
worst = 0.0
worst_by = {}
for a, b in zip(ref, got):
    for k in ("loss", "grad_norm", "val_loss"):
        if k in a:
            d = abs(a[k] - b[k]) / abs(a[k])
            worst = max(worst, d)
            worst_by[k] = max(worst_by.get(k, 0.0), d)
            assert d <= (grad_rtol if k == "grad_norm" else loss_rtol), f"{name} step {a['step']}: {k} {b[k]} vs single rank {a[k]}"
    assert b["step_ms_min"] <= b["step_ms"] and b["step_ms_min"] <= b["step_ms_max"], b
by = ", ".join(f"{k} {v:.1e}" for k, v in worst_by.items())
print(f"ok {name}: {steps} steps, worst relative difference {worst:.1e} ({by}; loss {got[-1]['loss']:.4f})")
