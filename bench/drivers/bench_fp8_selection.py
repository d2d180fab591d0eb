"""Does the automatic per-layer FP8 choice pay? The same training run in
fp32, all-FP8 (delayed scaling, hybrid format; or all-NVFP4 with --format
nvfp4), with the automatic choice (--fp8-layer-selection auto: calibration
passes measure how far each block alone in FP8 moves the model's gradient
and keep the worst --fp8-bf16-layer-budget blocks in 16-bit) and with the
manual first/last choice, over several seeds, on the built-in corpus.

  /usr/bin/python3 bench/drivers/bench_fp8_selection.py --claw build/bin/claw [--model gpt2-tiny]
      [--format fp8|e4m3|nvfp4] [--lr 1e-3] [--seeds 1,2,3] [--steps 200] [--budget 1] [--out /tmp/bench_fp8_selection.json]
      [--reuse earlier.json --rerun "auto choice"]

At 200 steps the runs' final losses differ from one another by less than
the spread between seeds, so each seed's FP8 run is compared with the fp32
run of the same seed (same initialisation and data order): the final loss
(mean of the last 10 steps) and its gap to fp32, and the mean absolute gap
between the two loss curves over the last half of the run (how far FP8
has pulled the run off its fp32 course). Memory: the arena bytes each run
allocated (the FP8 emulation keeps the same arenas whatever the choice).
Prints a markdown table: per seed, then the mean over seeds.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

FORMATS = {  # --format: the low-precision flags and the name of the all-low-precision run
    "fp8": (["--fp8-format", "hybrid"], "all-FP8 (delayed)"),
    "e4m3": (["--fp8-format", "e4m3"], "all-FP8 (delayed, E4M3 gradients)"),
    "nvfp4": (["--fp4"], "all-NVFP4"),
}


def runs_for(fmt):
    flags, name = FORMATS[fmt]
    return [("fp32", []), (name, flags), ("auto choice", flags + ["--fp8-layer-selection", "auto"]),
            ("first/last blocks bf16", flags + ["--first-last-layers-bf16"])]


def run(claw, model, steps, seq, seed, flags, budget, workdir, lr):
    metrics = os.path.join(workdir, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    if "auto" in flags:
        flags = flags + ["--fp8-bf16-layer-budget", str(budget)]
    cmd = [claw, "train", "--model", model, "--train-iters", str(steps), "--seq-length", str(seq), "--seed", str(seed),
           "--micro-batch-size", "8", "--global-batch-size", "8", "--lr", str(lr), "--lr-warmup-iters", "20",
           "--eval-interval", str(steps), "--eval-iters", "4", "--log-interval", str(steps),
           "--metrics-file", metrics] + flags
    out = subprocess.run(cmd, capture_output=True, text=True)
    log = out.stdout + out.stderr
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{log[-3000:]}")
    recs = [json.loads(line) for line in open(metrics)]
    val = [r["val_loss"] for r in recs if "val_loss" in r]
    arenas = re.search(r"arenas (\d+) B on this rank", log)
    kept = re.search(r"blocks kept out of FP8: (.*)", log)
    return {"loss": [r["loss"] for r in recs], "val_loss": val[-1], "arena_bytes": int(arenas.group(1)),
            "kept": kept.group(1).strip() if kept else ""}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", required=True)
    ap.add_argument("--model", default="gpt2-tiny")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seq-length", type=int, default=64)
    ap.add_argument("--budget", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--format", choices=sorted(FORMATS), default="fp8")
    ap.add_argument("--reuse", help="a JSON this script wrote: its runs are taken instead of run again, "
                    "except those named in --rerun")
    ap.add_argument("--rerun", default="", help="';'-separated run names to run even if --reuse has them")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "bench_fp8_selection.json"))
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    RUNS = runs_for(a.format)
    old = json.load(open(a.reuse)) if a.reuse else {}
    rerun = {n for n in a.rerun.split(";") if n}
    res = {}
    with tempfile.TemporaryDirectory() as d:
        for seed in seeds:
            for name, flags in RUNS:
                if f"{seed}/{name}" in old and name not in rerun:
                    res[(seed, name)] = old[f"{seed}/{name}"]
                    continue
                r = run(a.claw, a.model, a.steps, a.seq_length, seed, flags, a.budget, d, a.lr)
                r["final"] = sum(r["loss"][-10:]) / 10
                res[(seed, name)] = r
                print(f"seed {seed} {name}: final {r['final']:.4f} val {r['val_loss']:.4f} {r['kept']}", file=sys.stderr)
    half = a.steps // 2
    print(f"{a.model}, {a.steps} steps at sequence {a.seq_length}, batch 8, lr {a.lr:g}; {a.format}; auto budget {a.budget} "
          "block(s)\n")
    print("| seed | run | blocks in bf16 | final loss | vs fp32 | validation | vs fp32 | mean abs gap to fp32 curve, "
          "last half | arena bytes |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    summary = {name: {"dl": [], "dv": [], "gap": []} for name, _ in RUNS[1:]}
    for seed in seeds:
        ref = res[(seed, "fp32")]
        for name, _ in RUNS:
            r = res[(seed, name)]
            dl = (r["final"] - ref["final"]) / ref["final"]
            dv = (r["val_loss"] - ref["val_loss"]) / ref["val_loss"]
            gap = statistics.mean(abs(x - y) for x, y in zip(r["loss"][half:], ref["loss"][half:]))
            if name != "fp32":
                summary[name]["dl"].append(dl)
                summary[name]["dv"].append(dv)
                summary[name]["gap"].append(gap)
            kept = r["kept"] or ("all" if name == "fp32" else "none")
            print(f"| {seed} | {name} | {kept} | {r['final']:.4f} | {dl:+.2%} | {r['val_loss']:.4f} | {dv:+.2%} | "
                  f"{gap:.4f} | {r['arena_bytes']} |")
    print(f"\nMean over seeds {a.seeds}:\n")
    print("| run | final loss vs fp32 | validation vs fp32 | mean abs gap to fp32 curve |")
    print("|---|---:|---:|---:|")
    for name, s in summary.items():
        print(f"| {name} | {statistics.mean(s['dl']):+.2%} | {statistics.mean(s['dv']):+.2%} | "
              f"{statistics.mean(s['gap']):.4f} |")
    json.dump({f"{s}/{n}": r for (s, n), r in res.items()}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
