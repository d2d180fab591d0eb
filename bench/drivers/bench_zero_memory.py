#!/usr/bin/python3
"""Memory per rank of parameters + gradients + optimizer state under ZeRO.

For gpt2-124m, DP = 1, 2, 4 and ZeRO stages 0-3, runs `claw train` for a
few steps (mpirun for DP > 1) and reports, per rank (rank 0):
  * the memory plan's rows (the same functions that size the arenas),
  * the closed form for fp32 AdamW (ZeRO paper, Rajbhandari et al. 2020,
    section 5 with K = 8 bytes of optimizer state and 4-byte parameters and
    gradients): stage 0 16P, stage 1 8P + 8P/N, stage 2 4P + 12P/N,
    stage 3 16P/N (P parameters, N data-parallel ranks),
  * the measured peak RSS of rank 0 (ru_maxrss, from the metrics file).

  /usr/bin/python3 bench/drivers/bench_zero_memory.py --claw build/bin/claw
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
    for m in re.finditer(r"^\S*\s*(parameters|gradients|optimizer|gathered|grad staging|activations|total)\s+"
                         r"([\d.]+) (B|KiB|MiB|GiB)", log, re.M):
        rows[m.group(1)] = float(m.group(2)) * UNITS[m.group(3)]
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--claw", default="build/bin/claw")
    p.add_argument("--model", default="gpt2-124m")
    p.add_argument("--dp", default="1,2,4")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--stages", default="0,1,2,3")
    p.add_argument("--bucket-size", type=int, default=0, help="--ddp-bucket-size (0: claw's default)")
    a = p.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    print("| DP | ZeRO | params | grads | optimizer | gathered + staging | p+g+o (plan) | closed form | "
          "plan / closed form | peak RSS rank 0 | RSS - plan p+g+o |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for dp in map(int, a.dp.split(",")):
        for stage in map(int, a.stages.split(",")):
            with tempfile.TemporaryDirectory() as tmp:
                metrics = os.path.join(tmp, "m.jsonl")
                cmd = [a.claw, "train", "--model", a.model, "--micro-batch-size", "1", "--global-batch-size",
                       str(dp), "--seq-length", "128", "--train-iters", str(a.steps), "--eval-interval", "0",
                       "--peak-gflops", "100", "--num-threads", "1", "--zero-stage", str(stage),
                       "--ddp-bucket-size", str(a.bucket_size), "--metrics-file", metrics]
                if dp > 1:
                    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(dp)] + cmd
                r = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if r.returncode != 0:
                    sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
                plan = parse_plan(r.stdout + r.stderr)
                n = int(re.search(r"([\d.]+)M fp32 parameters", r.stdout + r.stderr).group(1).replace(".", "")) * 10**4
                rss = max(json.loads(l)["mem_bytes"] for l in open(metrics))
            P = n
            closed = {0: 16 * P, 1: 8 * P + 8 * P / dp, 2: 4 * P + 12 * P / dp, 3: 16 * P / dp}[stage]
            pgo = plan["parameters"] + plan["gradients"] + plan["optimizer"]
            slots = plan.get("gathered", 0) + plan.get("grad staging", 0)
            mib = lambda b: f"{b / 2**20:.0f} MiB"
            print(f"| {dp} | {stage} | {mib(plan['parameters'])} | {mib(plan['gradients'])} | "
                  f"{mib(plan['optimizer'])} | {mib(slots)} | {mib(pgo)} | {mib(closed)} | {pgo / closed:.3f} | "
                  f"{mib(rss)} | {mib(rss - pgo - slots)} |", flush=True)
    print(f"\nP = {n / 1e6:.2f} M parameters ({a.model})")


if __name__ == "__main__":
    main()
