"""Compares a resumed run's metrics with the run that never stopped.

    compare_resume.py REFERENCE GOT NAME FIRST STEPS [--bitwise | --rtol R [--grad-norm-rtol G]]

GOT must hold exactly STEPS records, for steps FIRST .. FIRST + STEPS - 1,
written once (by rank 0). Each record's loss, grad norm and validation loss
must equal REFERENCE's record of the same step: bit for bit with --bitwise
(the same layout resumed), else within relative tolerance R (default 1e-6:
another layout adds in another order); the grad norm within G (default R).
"""
import json
import sys

args = sys.argv[1:]
bitwise = "--bitwise" in args
rtol = 1e-6
if "--rtol" in args:
    rtol = float(args[args.index("--rtol") + 1])
    del args[args.index("--rtol"):args.index("--rtol") + 2]
grad_rtol = rtol
if "--grad-norm-rtol" in args:
    grad_rtol = float(args[args.index("--grad-norm-rtol") + 1])
    del args[args.index("--grad-norm-rtol"):args.index("--grad-norm-rtol") + 2]
args = [a for a in args if a != "--bitwise"]
ref_path, got_path, name, first, steps = args[0], args[1], args[2], int(args[3]), int(args[4])

ref = {r["step"]: r for r in map(json.loads, open(ref_path))}
got = [json.loads(line) for line in open(got_path)]
want_steps = list(range(first, first + steps))
assert [r["step"] for r in got] == want_steps, \
    f"{name}: steps {[r['step'] for r in got]}, want {first}..{first + steps - 1} (written once, by rank 0)"
worst = 0.0
for b in got:
    a = ref[b["step"]]
    for k in ("loss", "grad_norm", "val_loss"):
        if k not in a:
            continue
        assert k in b, f"{name} step {b['step']}: no {k}"
        if bitwise:
            assert a[k] == b[k], f"{name} step {b['step']}: {k} {b[k]!r} vs {a[k]!r} without stopping (not bitwise)"
        else:
            d = abs(a[k] - b[k]) / abs(a[k])
            if k != "grad_norm":
                worst = max(worst, d)
            assert d <= (grad_rtol if k == "grad_norm" else rtol), f"{name} step {b['step']}: {k} {b[k]} vs {a[k]} without stopping (relative {d:.1e})"
how = "bitwise equal" if bitwise else f"worst relative loss difference {worst:.1e} (tolerance {rtol:.0e})"
print(f"ok {name}: steps {first}-{first + steps - 1} {how}; loss at step {first} {got[0]['loss']:.6f}")
