"""BF16 speed: claw's gpt2-124m training step in fp32 and with --bf16 (and
FP8 delayed scaling, the emulation's cost), against PyTorch 2.x in fp32 and
under autocast(bfloat16), same model, batch and threads, in one run.

  /usr/bin/python3 bench/drivers/bench_bf16.py --claw build/bin/claw [--batch 4] [--seq 256] [--steps 6]
      [--threads 2] [--out /tmp/bench_bf16.json]

First it prints what decides the answer on this CPU (claw info): the
instruction sets (avx512_bf16, AMX), fp32 BLAS and oneDNN bf16 GEMM
GFLOP/s, and the bf16 kernel claw chose (kernels/cpu/bf16_gemm.h: oneDNN
where it outruns fp32 BLAS, else fp32 BLAS on the bf16 values). PyTorch
2.x comes from the venv of tools/torch2_env.sh (PyPI, made if missing).
The four configurations take turns, repeated --rounds times, and each
reports its median step.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_train import run_claw, torch_env  # noqa: E402


def claw_info(claw, threads):
    out = subprocess.run([claw, "info", "--num-threads", str(threads)], capture_output=True, text=True, check=True)
    return dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)


def run_torch(py, batch, seq, threads, steps, autocast):
    out = subprocess.run([py, os.path.join(HERE, "torch_gpt.py"), "--layers", "12", "--hidden", "768", "--heads", "12",
                          "--batch", str(batch), "--seq", str(seq), "--threads", str(threads), "--steps", str(steps),
                          "--autocast", autocast], capture_output=True, text=True, check=True,
                         env=torch_env("torch", threads))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="/tmp/bench_bf16.json")
    args = ap.parse_args()
    py = subprocess.run([os.path.join(HERE, "..", "..", "tools", "torch2_env.sh")], capture_output=True, text=True,
                        check=True).stdout.strip()
    info = claw_info(args.claw, args.threads)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"cpu: {cpu}\nflags: {info['cpu_precision_flags']}\nsgemm 2048: {info['sgemm_2048_gflops']} GFLOP/s\n"
          f"oneDNN bf16 gemm 2048: {info['bf16_gemm_2048_gflops']} GFLOP/s\nclaw bf16 kernel: {info['bf16_gemm']}",
          flush=True)
    peak = float(info["gemm_peak_gflops"])
    configs = {
        "claw fp32": lambda: run_claw(args.claw, "gpt2-124m", args.batch, args.seq, args.threads, args.steps, 2, peak),
        "claw --bf16": lambda: run_claw(args.claw, "gpt2-124m", args.batch, args.seq, args.threads, args.steps, 2, peak,
                                        ["--bf16"]),
        "claw --bf16 --fp8-format hybrid": lambda: run_claw(args.claw, "gpt2-124m", args.batch, args.seq, args.threads,
                                                            args.steps, 2, peak, ["--bf16", "--fp8-format", "hybrid"]),
        "torch fp32": lambda: run_torch(py, args.batch, args.seq, args.threads, args.steps, "none"),
        "torch autocast(bf16)": lambda: run_torch(py, args.batch, args.seq, args.threads, args.steps, "bf16"),
    }
    ms = {k: [] for k in configs}
    torch_version = ""
    for r in range(args.rounds):
        for name, run in configs.items():
            res = run()
            ms[name].append(res["ms_per_step"])
            torch_version = res.get("torch", torch_version)
            print(f"round {r + 1}: {name}: {res['ms_per_step']:.0f} ms/step", flush=True)
    tokens = args.batch * args.seq
    med = {k: statistics.median(v) for k, v in ms.items()}
    print(f"\ngpt2-124m, {args.batch} x {args.seq} tokens, {args.threads} threads, torch {torch_version}\n")
    print("| run | ms/step | tokens/s | vs claw fp32 | vs torch autocast(bf16) |")
    print("|---|---:|---:|---:|---:|")
    for k, m in med.items():
        print(f"| {k} | {m:.0f} | {tokens / (m / 1e3):.0f} | {med['claw fp32'] / m:.2f}x | "
              f"{med['torch autocast(bf16)'] / m:.2f}x |")
    with open(args.out, "w") as f:
        json.dump({"cpu": cpu, "info": info, "torch": torch_version, "ms_per_step": ms, "median": med}, f, indent=1)


if __name__ == "__main__":
    main()
