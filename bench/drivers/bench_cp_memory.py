#!/usr/bin/python3
"""Activation memory per rank under context parallelism.

gpt2-124m (positions extended to the sequence) at --seq-length 8192, one
sequence a step, CP = 1, 2, 4 (mpirun for CP > 1, ring attention): one
training step each, and per rank (rank 0):
  * the memory plan's activations (the function that sizes the arena; the
    trainer checks the arena against it),
  * the measured peak RSS (VmHWM, from the metrics file), less the plan's
    parameters + gradients + optimizer state and less the fixed overhead of
    the process (the RSS of the same run at --seq-length 64 less its plan):
    the activations as the operating system sees them.
The ratios to CP 1 are the point: activations divide by CP.

  /usr/bin/python3 bench/drivers/bench_cp_memory.py --claw build/bin/claw     # ~6 min on 2 cores
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def parse_plan(log):
    rows = {}
    for m in re.finditer(r"^\S*\s*(parameters|gradients|optimizer|activations)\s+([\d.]+) (B|KiB|MiB|GiB)", log, re.M):
        rows[m.group(1)] = float(m.group(2)) * UNITS[m.group(3)]
    return rows


def run(a, cp, seq, env):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        cmd = [a.claw, "train", "--model", a.model, "--max-position-embeddings", str(a.seq_length),
               "--seq-length", str(seq), "--micro-batch-size", "1", "--global-batch-size", "1",
               "--train-iters", "1", "--eval-interval", "0", "--peak-gflops", "100",
               "--context-parallel-size", str(cp), "--metrics-file", metrics]
        if cp > 1:
            cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(cp)] + cmd
        print("+", " ".join(cmd), file=sys.stderr, flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
        plan = parse_plan(r.stdout + r.stderr)
        rec = [json.loads(line) for line in open(metrics)][-1]
        return plan, rec


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--claw", default="build/bin/claw")
    p.add_argument("--model", default="gpt2-124m")
    p.add_argument("--seq-length", type=int, default=8192)
    p.add_argument("--cp", default="1,2,4")
    a = p.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mib = 2.0**20
    base_plan, base = run(a, 1, 64, env)
    overhead = base["mem_bytes"] - sum(base_plan[k] for k in ("parameters", "gradients", "optimizer")) \
        - base_plan["activations"]
    print(f"fixed overhead (RSS at --seq-length 64 less its plan): {overhead / mib:.0f} MiB", file=sys.stderr)
    rows, first = [], None
    for cp in map(int, a.cp.split(",")):
        plan, rec = run(a, cp, a.seq_length, env)
        pgo = sum(plan[k] for k in ("parameters", "gradients", "optimizer"))
        measured = rec["mem_bytes"] - pgo - overhead
        if first is None:
            first = (plan["activations"], measured)
        rows.append((cp, plan["activations"], measured, rec["mem_bytes"], rec["step_ms"] / 1e3))
    print(f"| CP | tokens a rank | activations (plan) | / CP 1 | peak RSS rank 0 | RSS - p+g+o - overhead | / CP 1 | step (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cp, plan_a, meas, rss, step in rows:
        print(f"| {cp} | {a.seq_length // cp} | {plan_a / mib:.0f} MiB | {plan_a / first[0]:.2f}x | {rss / mib:.0f} MiB | "
              f"{meas / mib:.0f} MiB | {meas / first[1]:.2f}x | {step:.1f} |")


if __name__ == "__main__":
    main()
