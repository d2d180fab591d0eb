"""Memory of LoRA against full fine-tuning: gpt2-124m at the same batch,
adapters of rank 8 and 64 on every linear layer (all-linear), on the
built-in corpus: the memory plan claw prints before step 1 (parameters,
gradients, optimizer state, activations), the process's peak RSS and the
step time.

    /usr/bin/python3 bench/drivers/bench_lora_memory.py --claw build/bin/claw [--steps 3]

Prints a markdown table for bench/RESULTS.md.
"""
import argparse
import os
import re
import subprocess
import sys


def measure(claw, extra, steps, threads):
    cmd = [claw, "train", "--model", "gpt2-124m", "--seq-length", "256", "--micro-batch-size", "4",
           "--global-batch-size", "4", "--train-iters", str(steps), "--eval-interval", "0", "--num-threads",
           str(threads), *extra]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(out.stdout + out.stderr)
    log = out.stdout + out.stderr
    row = {}
    for key in ("parameters", "gradients", "optimizer", "activations", "total"):
        m = re.search(rf"^\s+{key}\s+([0-9.]+) (\w+)", log, re.M)
        row[key] = float(m.group(1)) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[m.group(2)] if m else 0.0
    m = re.search(r"\(([0-9.]+)M frozen", log)
    row["frozen_m"] = float(m.group(1)) if m else 0.0
    m = re.search(r"([0-9.]+)M fp32 parameters", log)
    row["params_m"] = float(m.group(1)) if m else 0.0
    m = re.search(r"peak RSS ([0-9.]+) (\w+)", log)
    row["rss"] = float(m.group(1)) * (1024 if m.group(2) == "GiB" else 1) if m else 0.0
    times = [float(t) for t in re.findall(r"\| (\d+) ms/step", log)]
    row["ms"] = min(times[1:] or times)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", default="build/bin/claw")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    runs = [("full fine-tuning", []), ("LoRA r=8", ["--lora-rank", "8", "--lora-alpha", "16"]),
            ("LoRA r=64", ["--lora-rank", "64", "--lora-alpha", "128"])]
    rows = [(name, measure(os.path.abspath(a.claw), extra, a.steps, a.threads)) for name, extra in runs]
    full = rows[0][1]
    print("| run | trainable | parameters MiB | gradients MiB | optimizer MiB | activations MiB | planned MiB | "
          "peak RSS MiB | RSS vs full | ms/step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        trainable = r["params_m"] - r["frozen_m"]
        print(f"| {name} | {trainable:.2f}M | {r['parameters']:.1f} | {r['gradients']:.1f} | {r['optimizer']:.1f} | "
              f"{r['activations']:.1f} | {r['total']:.1f} | {r['rss']:.0f} | {r['rss'] / full['rss']:.2f}x | "
              f"{r['ms']:.0f} |")


if __name__ == "__main__":
    main()
