"""Perplexity of a model claw trained, at each GGUF type, by claw and by
llama.cpp's llama-perplexity on the same files.

    tools/llamacpp_build.sh llama-perplexity llama-quantize   # once (prints BUILD)
    python3 bench/drivers/bench_gguf_perplexity.py --claw build/bin/claw --llamacpp-bin BUILD/bin \\
        [--work DIR] [--steps 150] [--text FILE] [--ctx 256] [--json OUT]

The model: GPT-2's architecture at 4 layers of 256 (whole K-quant
super-blocks in every row), trained by `claw train` on the built-in corpus
(--steps; skipped when WORK/model holds a checkpoint), exported by
`claw ckpt export --format gguf` at F32 and F16; every other type is
llama-quantize's from the F32 file (its own per-tensor rules for the mixed
recipes). The text: held out from training (default: the 2021 address, after
the training split's, as tests/e2e/serve/quant_cli.sh takes it).

Per file, on 2 threads:
  - claw perplexity --score-second-half (the file's own types, products as
    llama.cpp computes them) and llama-perplexity (-c CTX -b CTX): both
    score the second half of each window of CTX tokens, so the figures are
    the same quantity; their relative difference is the agreement;
  - the perplexity's change against the F32 file's (claw's figures).
Results: a markdown table on stdout (for bench/RESULTS.md) and --json.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

TYPES = ["F32", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_0", "Q4_K_M", "IQ4_XS", "Q4_0", "Q3_K_M", "Q2_K"]
TRAIN = ["--model", "gpt2-tiny", "--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4",
         "--seq-length", "256", "--micro-batch-size", "4", "--global-batch-size", "8", "--lr", "1e-3",
         "--lr-warmup-iters", "10", "--eval-interval", "0", "--num-threads", "2"]


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench_gguf_perplexity: {what} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return r


def claw_ppl(a, path):
    out = run([a.claw, "perplexity", "--model", path, "--text-file", a.text, "--ctx-size", str(a.ctx),
               "--score-second-half", "--num-threads", "2", "--output-format", "json"], f"claw perplexity {path}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def llama_ppl(a, path):
    t0 = time.time()
    out = run([os.path.join(a.llamacpp_bin, "llama-perplexity"), "-m", path, "-f", a.text, "-c", str(a.ctx),
               "-b", str(a.ctx), "-t", "2"], f"llama-perplexity {path}")
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out.stdout + out.stderr)
    if not m:
        sys.exit(f"bench_gguf_perplexity: no 'Final estimate' from llama-perplexity on {path}:\n{out.stderr[-2000:]}")
    tokens = re.search(r"calculating perplexity over (\d+) chunks", out.stderr)
    return float(m.group(1)), float(m.group(2)), int(tokens.group(1)) if tokens else None, time.time() - t0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--claw", required=True)
    p.add_argument("--llamacpp-bin", required=True, help="llama.cpp's bin/ (tools/llamacpp_build.sh)")
    p.add_argument("--work", default="/tmp/claw-bench-ppl")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--text", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data",
                                              "sotu", "2021_joseph_r_biden_d.txt"))
    p.add_argument("--ctx", type=int, default=256)
    p.add_argument("--json")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, "model")
    if not os.path.exists(os.path.join(model, "latest_checkpointed_iteration.txt")):
        print(f"training {a.steps} steps into {model} ...", file=sys.stderr, flush=True)
        run([a.claw, "train", *TRAIN, "--train-iters", str(a.steps), "--save", model], "claw train")
    files = {}
    for t in ("F32", "F16"):
        files[t] = os.path.join(a.work, f"m-{t}.gguf")
        run([a.claw, "ckpt", "export", "--load", model, "--format", "gguf", "--type", t.lower(), "--output",
             files[t]], f"claw ckpt export --type {t.lower()}")
    quantize = os.path.join(a.llamacpp_bin, "llama-quantize")
    rows = []
    for t in TYPES:
        if t not in files:
            files[t] = os.path.join(a.work, f"m-{t}.gguf")
            run([quantize, files["F32"], files[t], t, "2"], f"llama-quantize {t}")
        mine = claw_ppl(a, files[t])
        ppl, err, chunks, secs = llama_ppl(a, files[t])
        rows.append(dict(type=t, mib=os.path.getsize(files[t]) / 2**20, claw=mine["perplexity"], llama=ppl,
                         llama_err=err, windows=mine["windows"], llama_chunks=chunks, tokens=mine["tokens"],
                         claw_s=mine["seconds"], llama_s=secs))
        print(f"{t}: claw {mine['perplexity']:.4f}, llama-perplexity {ppl:.4f} +/- {err:.4f}", file=sys.stderr,
              flush=True)
    f32 = rows[0]["claw"]
    print(f"| type | file MiB | claw PPL | llama-perplexity PPL | claw vs llama.cpp | vs F32 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['type']} | {r['mib']:.1f} | {r['claw']:.4f} | {r['llama']:.4f} ± {r['llama_err']:.4f} | "
              f"{100 * (r['claw'] / r['llama'] - 1):+.4f}% | {100 * (r['claw'] / f32 - 1):+.2f}% |")
    print(f"\n{rows[0]['windows']} windows of {a.ctx} tokens of {a.text}, {rows[0]['tokens']} tokens scored "
          f"(the second half of each window)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"text": a.text, "ctx": a.ctx, "steps": a.steps, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
