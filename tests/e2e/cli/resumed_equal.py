#!/usr/bin/python3
"""A resumed run's metrics equal the uninterrupted run's, bit for bit.

  resumed_equal.py FULL.jsonl RESUMED.jsonl FIRST LAST [FIELD ...]   (default fields: loss grad_norm)

RESUMED must hold exactly the steps FIRST..LAST, and each FIELD of each of
them must equal FULL's at the same step.
"""
import json
import sys

full_path, resumed_path, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fields = sys.argv[5:] or ["loss", "grad_norm"]
full = {r["step"]: r for r in map(json.loads, open(full_path))}
resumed = [json.loads(line) for line in open(resumed_path)]
steps = [r["step"] for r in resumed]
assert steps == list(range(first, last + 1)), f"resumed steps {steps}, expected {first}..{last}"
for r in resumed:
    for f in fields:
        assert r[f] == full[r["step"]][f], f"step {r['step']} {f}: resumed {r[f]}, uninterrupted {full[r['step']][f]}"
print(f"ok: steps {first}-{last} resumed equal the uninterrupted run's ({', '.join(fields)})")
