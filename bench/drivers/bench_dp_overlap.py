#!/usr/bin/python3
"""Exposed (non-overlapped) communication per step of data-parallel training.

Runs `mpirun -np N claw train` with and without --overlap-grad-reduce (ZeRO 0
and 2) and with and without --overlap-param-gather (ZeRO 3), and reports the
medians over the steps after the first of: step time, time the main thread
waited for gradient reductions (grad_comm_wait_ms: the exposed part of the
reduction) and for parameter gathers (param_gather_wait_ms), from rank 0's
metrics.

  /usr/bin/python3 bench/drivers/bench_dp_overlap.py --claw build/bin/claw --np 2
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--claw", default="build/bin/claw")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--model", default="gpt2-124m")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seq-length", type=int, default=128)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--bucket-size", type=int, default=10_000_000)
    a = p.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    threads = max(1, os.cpu_count() // a.np)
    print(f"# {a.model}, {a.np} ranks x {threads} thread(s), micro-batch {a.micro_batch_size} x {a.seq_length}, "
          f"bucket {a.bucket_size} elements; machine load {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print("| ZeRO | overlap | step ms | grad wait ms | gather wait ms | exposed share |")
    print("|---|---|---|---|---|---|")
    for stage, flags in [(0, []), (0, ["--overlap-grad-reduce"]), (2, []), (2, ["--overlap-grad-reduce"]),
                         (3, []), (3, ["--overlap-grad-reduce", "--overlap-param-gather"])]:
        with tempfile.TemporaryDirectory() as tmp:
            m = os.path.join(tmp, "m.jsonl")
            cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(a.np), a.claw, "train", "--model",
                   a.model, "--micro-batch-size", str(a.micro_batch_size), "--global-batch-size",
                   str(a.micro_batch_size * a.np), "--seq-length", str(a.seq_length), "--train-iters",
                   str(a.steps), "--eval-interval", "0", "--peak-gflops", "100", "--num-threads", str(threads),
                   "--zero-stage", str(stage), "--ddp-bucket-size", str(a.bucket_size), "--metrics-file", m] + flags
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode != 0:
                sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
            recs = [json.loads(l) for l in open(m)][1:]
        step = statistics.median(x["step_ms"] for x in recs)
        grad = statistics.median(x["grad_comm_wait_ms"] for x in recs)
        gather = statistics.median(x["param_gather_wait_ms"] for x in recs)
        print(f"| {stage} | {'on' if flags else 'off'} | {step:.0f} | {grad:.1f} | {gather:.1f} | "
              f"{(grad + gather) / step:.1%} |", flush=True)
        print(f"bench_dp_overlap np={a.np} zero={stage} overlap={int(bool(flags))} step_ms={step:.1f} "
              f"grad_wait_ms={grad:.2f} gather_wait_ms={gather:.2f}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
