#!/usr/bin/python3
"""Training speed of two claw binaries in the same run (a change against the
commit before it): `claw train` alternates between them, so drift in the
machine's load hits both alike. Prints one machine-readable line per figure
and the ratio of median step times (new / old; 1.00 = unchanged).

  /usr/bin/python3 bench/drivers/bench_binaries.py --old /tmp/claw-old --new build/bin/claw

Build the old binary with `git worktree add /tmp/old COMMIT` and cmake there
(bench/drivers/bitwise_vs_commit.sh does the same for the losses).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

CONFIGS = {  # name: flags
    "gpt2-tiny 8x256": ["--model", "gpt2-tiny", "--micro-batch-size", "8", "--global-batch-size", "8",
                        "--seq-length", "256"],
    "gpt2-124m 4x256": ["--model", "gpt2-124m", "--micro-batch-size", "4", "--global-batch-size", "4",
                        "--seq-length", "256"],
}


def step_ms(claw, flags, steps, warmup, threads):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        subprocess.run([claw, "train", *flags, "--train-iters", str(steps), "--eval-interval", "0",
                        "--num-threads", str(threads), "--peak-gflops", "100", "--metrics-file", metrics],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = [json.loads(line) for line in open(metrics)]
    return [r["step_ms"] for r in rows[warmup:]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="alternations of old and new per config")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    table = []
    for name in a.configs.split(","):
        ms = {"old": [], "new": []}
        for _ in range(a.rounds):
            for which in ("old", "new"):
                ms[which] += step_ms(getattr(a, which), CONFIGS[name], a.steps, a.warmup, a.threads)
        med = {k: statistics.median(v) for k, v in ms.items()}
        for k in ("old", "new"):
            print(f"bench_binaries config={name.replace(' ', '_')} binary={k} threads={a.threads} "
                  f"median_step_ms={med[k]:.1f} steps={len(ms[k])}")
        table.append((name, med["old"], med["new"], med["new"] / med["old"]))
    print("\n| config | old ms/step | new ms/step | new / old |\n|---|---|---|---|")
    for name, o, n, r in table:
        print(f"| {name} | {o:.1f} | {n:.1f} | {r:.3f} |")


if __name__ == "__main__":
    main()
