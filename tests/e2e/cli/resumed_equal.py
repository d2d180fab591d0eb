#!/usr/bin/python3
"""A resumed run's metrics equal the uninterrupted run's, bit for bit.

  resumed_equal.py FULL.jsonl RESUMED.jsonl FIRST LAST [FIELD ...]   (default fields: loss grad_norm)

RESUMED must hold each of the steps FIRST..LAST once: exactly those (a
file of the resumed run's own), or 1..LAST (the file of the interrupted
run, which the resumed one keeps up to its checkpoint and appends to); each
FIELD of every step there must equal FULL's at the same step.
"""
import json
import sys

full_path, resumed_path, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fields = sys.argv[5:] or ["loss", "grad_norm"]
full = {r["step"]: r for r in map(json.loads, open(full_path))}
resumed = [json.loads(line) for line in open(resumed_path)]
steps = [r["step"] for r in resumed]
assert steps in (list(range(first, last + 1)), list(range(1, last + 1))), \
    f"resumed steps {steps}, expected {first}..{last} (or 1..{last}, each once)"
for r in resumed:
    for f in fields:
        assert r[f] == full[r["step"]][f], f"step {r['step']} {f}: resumed {r[f]}, uninterrupted {full[r['step']][f]}"
print(f"ok: steps {steps[0]}-{last} (resumed from {first}) equal the uninterrupted run's ({', '.join(fields)})")
