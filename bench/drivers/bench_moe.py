#!/usr/bin/python3
"""Mixture of Experts: dispatch, layer speed and load balance, as markdown
for bench/RESULTS.md.

  dispatch  build/bin/bench_moe dispatch under mpirun at EP 2 and 4: claw's
            token dispatch and combine (gather, count exchange, rows out,
            expert-major reordering, and back) against two raw
            MPI_Alltoallv calls on the same buffers, and claw's comm layer
            alone on the same exchanges.
  layer     build/bin/bench_moe layer: model::MoELayer forward + backward
            (8 experts, top 2, SwiGLU width 1024) against model::MLP of
            width 2048 (the same active parameters), with the SGEMM roof at
            an expert's shape and the memory copy in the same run.
  balance   `claw train` of mixtral-tiny for 60 steps on the built-in
            corpus: tokens per expert (the worst layer's max / mean, the
            moe_load_max_over_mean metric logged every step) without
            balancing, with the load-balancing loss (coeff 0.02, Mixtral's)
            and with the aux-loss-free expert bias (DeepSeek-V3's; its
            update rate raised to 0.02 a step, since 60 steps at DeepSeek's
            1e-3 move a bias by at most 0.06), and the loss each reaches.

  /usr/bin/python3 bench/drivers/bench_moe.py [--claw build/bin/claw] [--bench build/bin/bench_moe]   # ~4 min on 2 cores
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"]


def fields(line):
    return {k: v for k, v in re.findall(r"(\w+)=(\S+)", line)}


def run(cmd, env):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r.stdout + r.stderr


def bench_line(out, name):
    for line in out.splitlines():
        if line.startswith(f"bench={name} "):
            return fields(line)
    sys.exit(f"no bench={name} line in:\n{out[-2000:]}")


def balance(a, env, label, extra):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        run([a.claw, "train", "--model", "mixtral-tiny", "--seq-length", "128", "--micro-batch-size", "4",
             "--global-batch-size", "8", "--train-iters", str(a.steps), "--eval-interval", "0", "--lr", "1e-3",
             "--lr-warmup-iters", "5", "--peak-gflops", "100", "--metrics-file", metrics] + extra, env)
        recs = [json.loads(line) for line in open(metrics) if '"moe_load_max_over_mean"' in line]
    last = recs[-20:]
    return {"label": label, "flags": " ".join(extra) or "(none)",
            "first": recs[0]["moe_load_max_over_mean"],
            "mean_last": sum(r["moe_load_max_over_mean"] for r in last) / len(last),
            "worst_last": max(r["moe_load_max_over_mean"] for r in last),
            "loss": sum(r["loss"] for r in last[-5:]) / 5}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--claw", default="build/bin/claw")
    p.add_argument("--bench", default="build/bin/bench_moe")
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")

    out = [f"CPU: {cpu}, {os.cpu_count()} cores.", "", "Dispatch (bench_moe dispatch; 4096 tokens a rank, hidden 1024, "
           "4 experts a rank, top 2, fp32; best of 7, slowest rank):", "",
           "| EP | bytes out a rank | claw dispatch + combine ms | claw comm only ms | raw MPI_Alltoallv x2 ms | "
           "claw / MPI | comm only / MPI | copy GB/s |", "|---|---|---|---|---|---|---|---|"]
    for n in (2, 4):
        d = bench_line(run(MPIRUN + ["-np", str(n), a.bench, "dispatch"], env), "moe_dispatch")
        out.append(f"| {n} | {int(d['bytes_out']) / 2**20:.0f} MiB | {float(d['claw_ms']):.1f} | "
                   f"{float(d['claw_comm_ms']):.1f} | {float(d['mpi_ms']):.1f} | {float(d['ratio']):.2f} | "
                   f"{float(d['comm_ratio']):.2f} | {float(d['copy_GBs']):.1f} |")
    l = bench_line(run([a.bench, "layer", "--threads", str(os.cpu_count())], env), "moe_layer")
    out += ["", "Layer (bench_moe layer; forward + backward, 2048 tokens, hidden 512, fp32):", "",
            "| layer | width | ms (best of 7, interleaved) | expert GFLOP/s | of the SGEMM roof |", "|---|---|---|---|---|",
            f"| MoE, 8 experts, top 2 | 2 x {l['expert_ffn']} | {float(l['moe_ms']):.1f} | "
            f"{float(l['moe_gflops']):.1f} | {float(l['moe_gflops']) / float(l['sgemm_gflops']):.0%} |",
            f"| dense MLP | {l['dense_ffn']} | {float(l['dense_ms']):.1f} | {float(l['dense_gflops']):.1f} | "
            f"{float(l['dense_gflops']) / float(l['sgemm_gflops']):.0%} |", "",
            f"MoE / dense time: {float(l['ratio']):.2f}x; SGEMM roof at an expert's shape "
            f"({int(l['tokens']) * int(l['topk']) // int(l['experts'])} x {l['expert_ffn']} x {l['hidden']}): "
            f"{float(l['sgemm_gflops']):.1f} GFLOP/s; copy {float(l['copy_GBs']):.1f} GB/s."]
    rows = [balance(a, env, "no balancing", ["--moe-aux-loss-coeff", "0"]),
            balance(a, env, "load-balancing loss", ["--moe-aux-loss-coeff", "0.02"]),
            balance(a, env, "expert bias (aux-loss-free)", ["--moe-aux-loss-coeff", "0",
                                                            "--moe-router-enable-expert-bias",
                                                            "--moe-router-bias-update-rate", "0.02"])]
    out += ["", f"Balance (mixtral-tiny, {a.steps} steps, 8 sequences of 128 tokens a step; tokens per expert = the "
            "worst layer's max / mean over the step, 1 = even, 8 = one expert takes all):", "",
            "| routing | flags | step 1 | mean, last 20 steps | worst, last 20 | loss, last 5 |",
            "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['label']} | `{r['flags']}` | {r['first']:.2f} | {r['mean_last']:.2f} | "
                   f"{r['worst_last']:.2f} | {r['loss']:.3f} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
