"""FP8 convergence: loss curves of the same run in fp32 and under each FP8
recipe (exact emulation, model/fp8.h), on the built-in corpus.

  /usr/bin/python3 bench/drivers/bench_fp8.py --claw build/bin/claw [--models gpt2-tiny,gpt2-124m]
      [--steps 200] [--seq-length 64] [--out /tmp/bench_fp8.json]

For each model: fp32, bf16 and fp16 GEMM operands (fp16 with dynamic loss
scaling), then FP8 hybrid (E4M3 forward, E5M2 gradients) with
delayed scaling (Megatron's defaults: history 1, most_recent; and TE's:
history 1024, max), tensorwise scaling, MXFP8, delayed scaling with the
first and last blocks out of FP8 and with the automatic per-block choice
(calibrated, one block kept out), blockwise scaling, and NVFP4. Prints a markdown table of the final
training loss (mean of the last 10 steps), the final validation loss and
their relative distance from fp32, and writes bench/results/fp8_convergence.png
(the training-loss curves, smoothed over 10 steps).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

RUNS = [
    ("fp32", []),
    ("bf16 GEMMs", ["--bf16"]),
    ("fp16 GEMMs + loss scaling", ["--fp16"]),
    ("fp8 delayed (history 1, most_recent)", ["--fp8-format", "hybrid"]),
    ("fp8 delayed (history 1024, max)", ["--fp8-format", "hybrid", "--fp8-amax-history-len", "1024",
                                         "--fp8-amax-compute-algo", "max"]),
    ("fp8 tensorwise", ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]),
    ("mxfp8", ["--fp8-format", "hybrid", "--fp8-recipe", "mxfp8"]),
    ("fp8 delayed, first/last block fp32", ["--fp8-format", "hybrid", "--first-last-layers-bf16"]),
    ("fp8 delayed, auto selection (budget 1)", ["--fp8-format", "hybrid", "--fp8-layer-selection", "auto",
                                                "--fp8-bf16-layer-budget", "1"]),
    ("fp8 blockwise", ["--fp8-format", "hybrid", "--fp8-recipe", "blockwise"]),
    ("nvfp4", ["--fp4"]),
]


def run(claw, model, steps, seq, flags, workdir):
    metrics = os.path.join(workdir, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [claw, "train", "--model", model, "--train-iters", str(steps), "--seq-length", str(seq),
           "--micro-batch-size", "8", "--global-batch-size", "8", "--lr", "1e-3", "--lr-warmup-iters", "20",
           "--eval-interval", str(max(1, steps // 4)), "--eval-iters", "4", "--log-interval", str(steps),
           "--metrics-file", metrics] + flags
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    recs = [json.loads(line) for line in open(metrics)]
    val = [r["val_loss"] for r in recs if "val_loss" in r]
    return {"loss": [r["loss"] for r in recs], "val_loss": val[-1] if val else None,
            "seconds": time.time() - t0, "tokens_per_s": recs[-1].get("tokens_per_s")}


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = list(results)
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models):
        for name, r in results[model].items():
            loss = r["loss"]
            smooth = [sum(loss[max(0, i - 9):i + 1]) / len(loss[max(0, i - 9):i + 1]) for i in range(len(loss))]
            ax.plot(range(1, len(loss) + 1), smooth, label=f"{name}: {r['final']:.4f}", lw=1.2)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (10-step mean)")
        ax.set_title(f"claw train {model}: fp32 against FP8 recipes", fontsize=10)
        ax.set_ylim(top=min(8.0, ax.get_ylim()[1]))
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", required=True)
    ap.add_argument("--models", default="gpt2-tiny")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seq-length", type=int, default=64)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "bench_fp8.json"))
    ap.add_argument("--png", default=os.path.join(HERE, "..", "results", "fp8_convergence.png"))
    ap.add_argument("--runs", default="", help="semicolon-separated run names to do (default: all); fp32 always runs")
    ap.add_argument("--reuse", default="", help="a JSON written by an earlier run: its runs are taken as they are "
                    "instead of being run again (same --steps and --seq-length)")
    a = ap.parse_args()
    cpu = open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(" :\t")
    results = {}
    earlier = json.load(open(a.reuse)) if a.reuse else {}
    with tempfile.TemporaryDirectory() as d:
        for model in a.models.split(","):
            results[model] = {}
            wanted = set(filter(None, a.runs.split(";")))
            for name, flags in RUNS:
                if wanted and name != "fp32" and name not in wanted and name not in earlier.get(model, {}):
                    continue
                if name in earlier.get(model, {}):
                    results[model][name] = earlier[model][name]
                    continue
                r = run(a.claw, model, a.steps, a.seq_length, flags, d)
                r["final"] = sum(r["loss"][-10:]) / len(r["loss"][-10:])
                results[model][name] = r
                print(f"{model} {name}: final {r['final']:.4f} val {r['val_loss']} ({r['seconds']:.0f} s)",
                      file=sys.stderr)
    print(f"CPU: {cpu}; {a.steps} steps at sequence {a.seq_length}, batch 8, lr 1e-3\n")
    print("| model | run | final loss (last 10 steps) | vs fp32 | validation loss | vs fp32 | tokens/s |")
    print("|---|---|---|---|---|---|---|")
    for model, runs in results.items():
        ref = runs["fp32"]
        for name, r in runs.items():
            dl = (r["final"] - ref["final"]) / ref["final"]
            dv = (r["val_loss"] - ref["val_loss"]) / ref["val_loss"]
            print(f"| {model} | {name} | {r['final']:.4f} | {dl:+.2%} | {r['val_loss']:.4f} | {dv:+.2%} | "
                  f"{r['tokens_per_s']:.0f} |")
    plot(results, a.png)
    json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
