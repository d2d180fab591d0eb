"""The planner's memory and step-time predictions against claw's own CPU runs.

For each layout of a grid (DP with ZeRO 0-3, TP, TP + SP, PP with 1F1B and
GPipe, and their combinations, on 1-4 ranks of this machine), runs
`claw train` for a few steps with --log-all-ranks and compares, on the rank
that needs the most:

  - arenas: the bytes the trainer allocated (it checks them against the
    planner's model, so these agree by construction) and `claw plan`'s
    memory per device without the runtime overhead;
  - peak RSS: measured (VmHWM) against `claw plan`'s memory per device
    (arenas + the catalog's runtime overhead for the cpu device);
  - step time (single rank, --num-threads 2): measured median against the
    planner's step time on the cpu device.

    /usr/bin/python3 bench/drivers/planner_memory.py --claw build/bin/claw [--model gpt2-124m --seq 256 --steps 4]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"]
GRID = [  # ranks, claw train layout flags (overlap where the planner would choose it)
    (1, ""),
    (1, "--recompute-granularity full"),
    (2, "--overlap-grad-reduce"),
    (2, "--use-distributed-optimizer --overlap-grad-reduce"),
    (2, "--zero-stage 2 --overlap-grad-reduce"),
    (2, "--zero-stage 3 --overlap-grad-reduce --overlap-param-gather"),
    (2, "--tensor-model-parallel-size 2"),
    (2, "--tensor-model-parallel-size 2 --sequence-parallel"),
    (2, "--pipeline-model-parallel-size 2"),
    (2, "--pipeline-model-parallel-size 2 --pipeline-schedule gpipe"),
    (4, "--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce"),
    (4, "--pipeline-model-parallel-size 2 --use-distributed-optimizer"),
    (4, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"),
    (4, "--pipeline-model-parallel-size 4"),
]


def plan_flags(train_flags):
    """The `claw plan` pins equal to a `claw train` layout (the planner chooses overlap itself: on wherever
    claw can, which the grid's flags follow)."""
    out = [a for a in train_flags.split() if not a.startswith("--overlap")]
    defaults = {"--tensor-model-parallel-size": ["1"], "--pipeline-model-parallel-size": ["1"],
                "--recompute-granularity": ["none"]}
    for flag, value in defaults.items():
        if flag not in out:
            out += [flag, *value]
    if "--zero-stage" not in out and "--use-distributed-optimizer" not in out:
        out += ["--zero-stage", "0"]
    if "--sequence-parallel" not in out:
        out.append("--no-sequence-parallel")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", default="build/bin/claw")
    ap.add_argument("--model", default="gpt2-124m")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--mb", type=int, default=2)
    ap.add_argument("--gbs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    opts = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    job = ["--model", opts.model, "--seq-length", str(opts.seq), "--global-batch-size", str(opts.gbs)]
    print("| ranks | layout | arenas MiB (trainer) | arenas MiB (plan) | comm buffers MiB (plan) | peak RSS MiB |"
          " plan MiB | RSS error | step s | plan s | step error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rss_err, step_err = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for np, flags in GRID:
            metrics = os.path.join(tmp, "m.jsonl")
            cmd = [opts.claw, "train", *job, "--micro-batch-size", str(opts.mb), "--train-iters", str(opts.steps),
                   "--eval-interval", "0", "--log-all-ranks", "--metrics-file", metrics, *flags.split()]
            if np == 1:
                cmd += ["--num-threads", "2"]
            else:
                cmd = MPIRUN + ["-np", str(np)] + cmd
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
            if out.returncode != 0:
                print(f"| {np} | {flags} | failed: {out.stdout[-300:]} {out.stderr[-300:]} |")
                continue
            log = out.stdout + out.stderr
            arenas = [int(x) for x in re.findall(r"arenas (\d+) B on this rank", log)]
            rss = []
            for v, unit in re.findall(r"peak RSS ([0-9.]+) (MiB|GiB)", log):
                rss.append(float(v) * (1024 if unit == "GiB" else 1))
            p = subprocess.run([opts.claw, "plan", *job, "--device", "cpu", "--num-gpus", str(np), "--gpus-per-node",
                                str(np), "--micro-batch-size", str(opts.mb), "--trainer-only", "--json",
                                *plan_flags(flags)], capture_output=True, text=True)
            if p.returncode != 0:
                print(f"| {np} | {flags} | plan failed: {p.stderr.strip()} |")
                continue
            est = json.loads(p.stdout)["layouts"][0]
            mem = est["memory_breakdown_bytes"]
            plan_arenas = (est["memory_bytes_per_device"] - mem["runtime"] - mem["comm_buffers"]) / 2**20
            plan_total = est["memory_bytes_per_device"] / 2**20
            err = (plan_total - max(rss)) / max(rss)
            rss_err.append(abs(err))
            step, pstep, serr = "", "", ""
            if np == 1:
                with open(metrics) as f:
                    rows = [json.loads(line) for line in f]
                s = statistics.median(r["step_ms"] for r in rows[1:]) / 1e3
                e = (est["step_time_s"] - s) / s
                step_err.append(abs(e))
                step, pstep, serr = f"{s:.2f}", f"{est['step_time_s']:.2f}", f"{100 * e:+.1f}%"
            print(f"| {np} | {flags or '(one rank)'} | {max(arenas) / 2**20:.1f} | "
                  f"{plan_arenas:.1f} | {mem['comm_buffers'] / 2**20:.1f} | {max(rss):.1f} | {plan_total:.1f} | {100 * err:+.1f}% | {step} | {pstep} |"
                  f" {serr} |", flush=True)
    print()
    print(f"peak RSS vs plan: median |error| {100 * statistics.median(rss_err):.1f}%, max {100 * max(rss_err):.1f}% "
          f"over {len(rss_err)} layouts")
    if step_err:
        print(f"step time vs plan (one rank): max |error| {100 * max(step_err):.1f}%")


if __name__ == "__main__":
    main()
