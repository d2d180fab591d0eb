"""Measured pipeline idle time per stage against the simulator's prediction.

Runs `claw train` under mpirun with pipeline parallelism for each executed
schedule, reads the per-stage timings the trainer writes to the metrics
(pp_step_ms, pp_idle_ms, pp_forward_ms, pp_backward_ms), and gives the
measured mean forward/backward cost of each stage to
`bench_pipeline_sim --predict`, which runs the same action lists. Prints a
markdown table: measured vs predicted step time and idle time per stage.

    /usr/bin/python3 bench/drivers/bench_pipeline.py --claw build/bin/claw [--np 4]
    # balanced stages: the last holds the LM head (~8 blocks at hidden 512) and one block
    /usr/bin/python3 bench/drivers/bench_pipeline.py --claw build/bin/claw --hidden 512 --layers 28 \
        --last-stage-layers 1 --seq 128 --steps 6
"""
import argparse
import json
import os
import subprocess
import tempfile


def mean(rows, key):
    n = len(rows[0][key])
    return [sum(r[key][s] for r in rows) / len(rows) for s in range(n)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", default="build/bin/claw")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=0, help="default: 2 per stage")
    ap.add_argument("--last-stage-layers", type=int, default=-1)
    ap.add_argument("--seq", type=int, default=256)
    args = ap.parse_args()
    sim = os.path.join(os.path.dirname(args.claw), "bench_pipeline_sim")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p, m = args.np, args.microbatches
    layers = args.layers or 2 * p
    common = ["--model", "gpt2-tiny", "--num-layers", str(layers), "--hidden-size", str(args.hidden),
              "--seq-length", str(args.seq), "--micro-batch-size", "1",
              "--global-batch-size", str(m), "--train-iters", str(args.steps), "--eval-interval", "0",
              "--num-threads", "1", "--peak-gflops", "100", "--pipeline-model-parallel-size", str(p)]
    if args.last_stage_layers > 0:
        common += ["--decoder-last-pipeline-num-layers", str(args.last_stage_layers)]
    runs = [("gpipe", 1, ["--pipeline-schedule", "gpipe"]), ("1f1b", 1, []),
            ("interleaved", layers // p, ["--num-layers-per-virtual-pipeline-stage", "1"]),
            ("zb-h1", 1, ["--pipeline-schedule", "zb-h1"])]
    if args.last_stage_layers > 0:
        runs = [r for r in runs if r[0] != "interleaved"]  # uneven stages are not interleaved
    print(f"gpt2-tiny shape, hidden {args.hidden}, {layers} layers"
          f"{f' (last stage {args.last_stage_layers})' if args.last_stage_layers > 0 else ''}, PP {p}, {m} "
          f"micro-batches of 1 x {args.seq} tokens, steps 3-{args.steps}; "
          f"one thread per rank, {p} ranks on {os.cpu_count()} cores\n")
    print("| schedule | step ms measured | step ms simulated | bubble measured | idle ms per stage, measured | "
          "idle ms per stage, simulated | peak RSS rank 0 |")
    print("|---|---|---|---|---|---|---|")
    for name, v, flags in runs:
        with tempfile.TemporaryDirectory() as tmp:
            metrics = os.path.join(tmp, "m.jsonl")
            subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(p), args.claw, "train",
                            *common, *flags, "--metrics-file", metrics], env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            rows = [json.loads(line) for line in open(metrics)][2:]
        step = mean(rows, "pp_step_ms")
        idle = mean(rows, "pp_idle_ms")
        fwd = mean(rows, "pp_forward_ms")
        bwd = mean(rows, "pp_backward_ms")
        wgt = mean(rows, "pp_weight_ms")
        costs = [",".join(f"{x:.4f}" for x in fwd), ",".join(f"{x:.4f}" for x in bwd)]
        if name == "zb-h1":
            costs.append(",".join(f"{x:.4f}" for x in wgt))
        out = subprocess.run([sim, "--predict", name, str(p), str(m), str(v), *costs], check=True,
                             capture_output=True, text=True).stdout
        words = out.split()
        sim_step = float(words[1])
        sim_idle = [float(x) for x in words[words.index("idle_ms") + 1:]]
        bubble = sum(idle) / (max(step) * p)
        rss = rows[-1]["mem_bytes"] / 2**20
        print(f"| {name} | {max(step):.1f} | {sim_step:.1f} | {bubble:.3f} | {' / '.join(f'{x:.1f}' for x in idle)} | "
              f"{' / '.join(f'{x:.1f}' for x in sim_idle)} | {rss:.0f} MiB |")


if __name__ == "__main__":
    main()
