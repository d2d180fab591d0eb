"""Bytes of model state per parameter under each precision, from claw's
memory plan (the arenas it allocates) and from peak RSS, against Megatron's
closed forms (Megatron-Core's distributed-optimizer guide: parameter,
gradient, main-parameter and moment bytes, before ZeRO sharding).

  /usr/bin/python3 bench/drivers/bench_memory_precision.py --claw build/bin/claw [--model gpt2-124m]

Each configuration trains 2 steps of micro-batch 1 x 64 tokens on one rank
(activations small next to the state). The plan's parameters + gradients +
optimizer rows over the parameter count give bytes per parameter; the RSS
column is the difference of each run's peak RSS from the fp32 run's, per
parameter, next to the plan's difference (what the state saves in
practice). claw keeps one fp32 copy of the parameters and forms the 16-bit
GEMM operands per product, so --bf16 holds no 2-byte parameter copy: its
main parameters are the parameters. With --main-params-dtype fp16 the store
holds only the 2-byte masters and each unit in use gets an fp32 working copy
(the plan's "working copies" row, counted in the state here: the largest
unit, the tied embedding, dominates it).
"""
import argparse
import re
import subprocess
import tempfile

CONFIGS = [
    # name, flags, Megatron closed form (bytes/param), its terms
    ("fp32", [], 16, "4 param + 4 grad + 4 + 4 moments"),
    ("--bf16", ["--bf16"], 18, "2 bf16 param + 4 fp32 grad + 4 fp32 main param + 4 + 4 moments"),
    ("--bf16, bf16 moments", ["--bf16", "--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16",
                              "--exp-avg-sq-dtype", "bf16"], 14, "2 + 4 + 4 main param + 2 + 2 moments"),
    ("--bf16, fp16 exp_avg, bf16 exp_avg_sq", ["--bf16", "--use-precision-aware-optimizer", "--exp-avg-dtype",
                                               "fp16", "--exp-avg-sq-dtype", "bf16"], 14, "2 + 4 + 4 + 2 + 2"),
    ("--bf16, bf16 exp_avg, fp32 exp_avg_sq", ["--bf16", "--use-precision-aware-optimizer", "--exp-avg-dtype",
                                               "bf16"], 16, "2 + 4 + 4 + 2 + 4"),
    ("--bf16, fp16 main params", ["--bf16", "--use-precision-aware-optimizer", "--main-params-dtype", "fp16"], 16,
     "2 bf16 param + 4 grad + 2 fp16 main param + 4 + 4"),
    ("--bf16, fp16 main params, bf16 moments", ["--bf16", "--use-precision-aware-optimizer", "--main-params-dtype",
                                                "fp16", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"], 12,
     "2 + 4 + 2 + 2 + 2"),
    ("--bf16, fp8 moments", ["--bf16", "--use-precision-aware-optimizer", "--exp-avg-dtype", "fp8",
                             "--exp-avg-sq-dtype", "fp8"], 12, "2 + 4 + 4 + 1 + 1 (per-tensor scales)"),
    ("--bf16, fp16 main params, fp8 moments", ["--bf16", "--use-precision-aware-optimizer", "--main-params-dtype",
                                               "fp16", "--exp-avg-dtype", "fp8", "--exp-avg-sq-dtype", "fp8"], 10,
     "2 + 4 + 2 + 1 + 1"),
]

MIB = 1024 * 1024
UNITS = {"B": 1, "KiB": 1024, "MiB": MIB, "GiB": 1024 * MIB}


def row_bytes(log, name):
    m = re.search(rf"^\s*{name}\s+([0-9.]+) (B|KiB|MiB|GiB)\b", log, re.M)
    if not m:
        raise RuntimeError(f"no '{name}' row in the memory plan")
    return float(m.group(1)) * UNITS[m.group(2)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", required=True)
    ap.add_argument("--model", default="gpt2-124m")
    args = ap.parse_args()
    rows = []
    for name, flags, megatron, terms in CONFIGS:
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run([args.claw, "train", "--model", args.model, "--micro-batch-size", "1",
                                  "--seq-length", "64", "--train-iters", "2", "--eval-interval", "0",
                                  "--num-threads", "2", "--peak-gflops", "100", *flags],
                                 capture_output=True, text=True, cwd=tmp)
        log = out.stdout + out.stderr
        if out.returncode != 0:
            raise RuntimeError(f"{name}: claw train failed:\n{log[-2000:]}")
        params = float(re.search(r"([0-9.]+)M (?:fp32|fp16 master) parameters", log).group(1)) * 1e6
        state = sum(row_bytes(log, r) for r in ("parameters", "gradients", "optimizer"))
        if "working copies" in log:
            state += row_bytes(log, "working copies")
        m = re.search(r"peak RSS ([0-9.]+) (B|KiB|MiB|GiB)\b", log)
        rss = float(m.group(1)) * UNITS[m.group(2)]
        rows.append((name, megatron, terms, state / params, state, rss, params))
        print(f"{name}: {state / params:.2f} B/param planned, peak RSS {rss / MIB:.0f} MiB", flush=True)
    base_state, base_rss = rows[0][4], rows[0][5]
    print(f"\n{args.model}, {rows[0][6] / 1e6:.2f}M parameters, one rank (no ZeRO)\n")
    print("| run | Megatron closed form | claw plan B/param | saved vs fp32, plan | saved vs fp32, peak RSS |")
    print("|---|---|---:|---:|---:|")
    for name, megatron, terms, bpp, state, rss, params in rows:
        print(f"| {name} | {megatron} ({terms}) | {bpp:.2f} | {(base_state - state) / params:.2f} | "
              f"{(base_rss - rss) / params:.2f} |")


if __name__ == "__main__":
    main()
