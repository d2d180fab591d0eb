#!/usr/bin/python3
"""Training throughput of claw against PyTorch on the same machine, same run.

For each model config and thread count:
  * the MFU denominator: the calibrated fp32 GEMM peak that `claw info` and
    `claw train` read from claw's cache (src/claw/kernels/cpu/peak.h: the
    best of the model's GEMM shapes and 2048^3, measured once per machine
    and thread count), the same figure for every implementation;
  * claw: `claw train` on the built-in corpus; median ms/step after warm-up
    steps, tokens/s, MFU, peak RSS; claw-recompute: the same with
    --recompute-granularity full (every block recomputed in backward);
  * PyTorch (bench/drivers/torch_gpt.py: the same GPT-2, batch, AdamW, clipping):
      torch-default  Debian's python3-torch as installed: no thread settings at all
                     (run once per model; its OpenBLAS picks its own thread count)
      torch-threads  the same with torch.set_num_threads(threads) and
                     OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = threads
      torch-tuned    + OPENBLAS_CORETYPE=SkylakeX (when the CPU has AVX-512),
                     the OpenMP OpenBLAS (LD_LIBRARY_PATH) and jemalloc (LD_PRELOAD),
                     and the fastest intra-op thread count from `threads` down to 1
                     (timed in turns in one process: on a shared 2-core machine
                     PyTorch 1.13's many short OpenMP regions can run slower on
                     2 threads than on 1)
      torch2         a PyTorch 2.x from PyPI, if --torch2-python names its interpreter
                     (thread counts chosen as for torch-tuned; torch2-threads: exactly
                     the row's thread count, --torch2-variant)
Prints one machine-readable line per figure, then a markdown table.

  /usr/bin/python3 bench/drivers/bench_train.py --claw build/bin/claw
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {  # name: (layers, hidden, heads, positions)
    "gpt2-tiny": (4, 256, 4, 1024),
    "gpt2-124m": (12, 768, 12, 1024),
}
V, VP = 50257, 50304
ARCH = "x86_64-linux-gnu"


def flops_per_token(model, T):
    L, C, H, P = MODELS[model]
    # N = parameters in matmuls: blocks + final norm + the (tied) LM head; the
    # position table is a lookup. 6N + 12 L H Q T (PaLM appendix B).
    block = 2 * 2 * C + 3 * C * C + 3 * C + C * C + C + 4 * C * C + 4 * C + 4 * C * C + C
    N = L * block + 2 * C + VP * C
    return 6 * N + 12 * L * H * (C // H) * T


def gemm_peak(claw, threads):
    out = subprocess.run([claw, "info", "--num-threads", str(threads)], capture_output=True, text=True, check=True)
    fields = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    if "gemm_peak_gflops" not in fields:
        raise RuntimeError("claw info printed no gemm_peak_gflops")
    return float(fields["gemm_peak_gflops"]), fields.get("gemm_peak_provenance", "")


def run_claw(claw, model, B, T, threads, steps, warmup, peak, extra=()):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        subprocess.run([claw, "train", "--model", model, "--micro-batch-size", str(B), "--seq-length", str(T),
                        "--train-iters", str(warmup + steps), "--eval-interval", "0", "--num-threads", str(threads),
                        "--peak-gflops", str(peak), "--metrics-file", metrics, "--log-interval", "1000", *extra],
                       check=True, capture_output=True, text=True)
        recs = [json.loads(l) for l in open(metrics)]
    ms = statistics.median(r["step_ms"] for r in recs[warmup:])
    return {"ms_per_step": ms, "peak_rss_bytes": recs[-1]["mem_bytes"]}


def torch_env(variant, threads):
    env = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "LD_LIBRARY_PATH", "LD_PRELOAD", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "MKL_NUM_THREADS"):
        env.pop(k, None)
    if variant != "torch-default":
        # torch.set_num_threads does not reach Debian's OpenBLAS thread pool.
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[k] = str(threads)
    if variant == "torch-tuned":
        if "avx512f" in open("/proc/cpuinfo").read():
            env["OPENBLAS_CORETYPE"] = "SkylakeX"
        env["LD_LIBRARY_PATH"] = f"/usr/lib/{ARCH}/openblas-openmp"
        jemalloc = f"/usr/lib/{ARCH}/libjemalloc.so.2"
        if os.path.exists(jemalloc):
            env["LD_PRELOAD"] = jemalloc
    return env


def run_torch(python, variant, model, B, T, threads, steps, warmup):
    L, C, H, P = MODELS[model]
    cmd = [python, os.path.join(HERE, "torch_gpt.py"), "--layers", str(L), "--hidden", str(C), "--heads", str(H),
           "--batch", str(B), "--seq", str(T), "--steps", str(steps), "--warmup", str(warmup),
           "--threads", "0" if variant == "torch-default" else
           str(threads) if variant in ("torch-threads", "torch2-threads") else ",".join(str(n) for n in range(threads, 0, -1))]
    env = torch_env(variant, threads)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{variant} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", default=os.path.join(HERE, "..", "..", "build", "bin", "claw"))
    ap.add_argument("--configs", default="gpt2-tiny:8:256,gpt2-124m:4:256", help="model:B:T,...")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--torch-variants", default="torch-default,torch-threads,torch-tuned")
    ap.add_argument("--claw-variants", default="claw,claw-recompute", help="claw always runs; claw-recompute optional")
    ap.add_argument("--torch2-python", help="interpreter of a PyTorch 2.x install (e.g. a venv's python)")
    ap.add_argument("--torch2-variant", default="torch2", choices=["torch2", "torch2-threads"],
                    help="torch2: the fastest thread count from --threads down to 1; torch2-threads: exactly --threads")
    args = ap.parse_args()

    rows = []
    for spec in args.configs.split(","):
        model, B, T = spec.split(":")
        B, T = int(B), int(T)
        tokens = B * T
        fpt = flops_per_token(model, T)
        for threads in map(int, args.threads.split(",")):
            peak, provenance = gemm_peak(args.claw, threads)
            print(f"bench=peak threads={threads} gflops={peak:.1f} provenance={provenance!r}", flush=True)
            runs = [("claw", lambda: run_claw(args.claw, model, B, T, threads, args.steps, args.warmup, peak))]
            if "claw-recompute" in args.claw_variants.split(","):
                runs.append(("claw-recompute", lambda: run_claw(args.claw, model, B, T, threads, args.steps,
                                                                args.warmup, peak, ["--recompute-granularity", "full"])))
            for v in filter(None, args.torch_variants.split(",")):
                if v == "torch-default" and threads != max(map(int, args.threads.split(","))):
                    continue
                runs.append((v, lambda v=v: run_torch("/usr/bin/python3", v, model, B, T, threads, args.steps,
                                                      args.warmup)))
            if args.torch2_python:
                runs.append((args.torch2_variant, lambda: run_torch(args.torch2_python, args.torch2_variant, model, B,
                                                                    T, threads, args.steps, args.warmup)))
            for impl, fn in runs:
                r = fn()
                tps = tokens / (r["ms_per_step"] / 1e3)
                mfu = fpt * tps / (peak * 1e9)
                row = dict(impl=impl, model=model, B=B, T=T, threads="default" if impl == "torch-default" else threads, ms=r["ms_per_step"], tps=tps, mfu=mfu,
                           rss=r["peak_rss_bytes"], version=r.get("torch", ""), torch_threads=r.get("threads"))
                rows.append(row)
                print(f"bench=train impl={impl} model={model} B={B} T={T} threads={threads} "
                      f"ms_per_step={row['ms']:.1f} tokens_per_s={tps:.1f} mfu={mfu:.3f} "
                      f"peak_rss_mb={row['rss'] / 2**20:.0f} peak_gflops={peak:.1f}"
                      + (f" torch_version={row['version']} torch_threads={row['torch_threads']}"
                         if row["version"] else ""), flush=True)
    # Ratios against the best PyTorch variant of each (model, threads).
    print()
    print("| model | threads | impl | ms/step | tokens/s | MFU | peak RSS | claw speed-up | claw RSS ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        t = max(map(int, args.threads.split(","))) if r["threads"] == "default" else r["threads"]
        claw = next(x for x in rows if x["impl"] == "claw" and x["model"] == r["model"] and x["threads"] == t)
        used = f" (ran on {r['torch_threads']})" if r["version"] and r["torch_threads"] != r["threads"] else ""
        print(f"| {r['model']} | {r['threads']}{used} | {r['impl']}{(' ' + r['version']) if r['version'] else ''} | "
              f"{r['ms']:.0f} | {r['tps']:.0f} | {100 * r['mfu']:.1f}% | {r['rss'] / 2**30:.2f} GiB | "
              f"{claw['tps'] / r['tps']:.2f}x | {claw['rss'] / r['rss']:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
