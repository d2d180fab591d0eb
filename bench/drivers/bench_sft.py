"""Does supervised fine-tuning teach? A small model pretrained by claw on the
built-in corpus, then fine-tuned with `claw train --sft` on a synthetic
instruction task (scripts/sft_task.py: reverse 3-5 words), in full and with
LoRA adapters (alone, and with the tied embeddings training beside them),
scored by exact match on held-out conversations with generation through
`claw serve` (greedy, the plain chat template), before SFT and along it.

    /usr/bin/python3 bench/drivers/bench_sft.py --claw build/bin/claw [--base-steps 300] [--sft-steps 600]
        [--runs full,lora,lora-save] [--workdir /tmp/claw-bench-sft]

Prints a markdown table (for bench/RESULTS.md) and writes the figures to
--out as JSON. The pretrained base is kept in the work directory and reused.
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

import bench_serve as bs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, logfile):
    log("+", " ".join(cmd))
    with open(logfile, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n" + open(logfile).read()[-3000:])
    return open(logfile).read()


def chat(s, messages):
    """One greedy chat completion from a bench_serve.ClawServer: the reply's text."""
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    c.request("POST", "/v1/chat/completions",
              json.dumps({"messages": messages, "temperature": 0, "max_tokens": 16}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    body = json.loads(r.read())
    c.close()
    assert r.status == 200, body
    return body["choices"][0]["message"]["content"]


def accuracy(claw, model, step, tests, threads, logfile):
    """Exact-match share of the held-out conversations (reply stripped of spaces)."""
    s = bs.ClawServer(claw, model, threads, logfile, ("--ckpt-step", str(step)))
    hits = [0] * len(tests)
    try:
        def one(i):
            msgs = tests[i]["messages"]
            hits[i] = int(chat(s, msgs[:-1]).strip() == msgs[-1]["content"])
        for i0 in range(0, len(tests), 16):
            ts = [threading.Thread(target=one, args=(i,)) for i in range(i0, min(len(tests), i0 + 16))]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        sample = chat(s, tests[0]["messages"][:-1])
    finally:
        s.stop()
    return sum(hits) / len(tests), sample


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", default="build/bin/claw")
    ap.add_argument("--workdir", default="/tmp/claw-bench-sft")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--base-steps", type=int, default=300)
    ap.add_argument("--sft-steps", type=int, default=600)
    ap.add_argument("--points", type=int, default=4, help="checkpoints along SFT to score")
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--runs", default="full,lora,lora-save",
                    help="which fine-tunings: full, lora (adapters only), lora-save (adapters and the tied "
                         "embeddings/output layer, --lora-modules-to-save)")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "results", "sft_results.json"))
    a = ap.parse_args()
    claw = os.path.abspath(a.claw)
    w = a.workdir
    os.makedirs(w, exist_ok=True)
    common = ["--model", "gpt2-tiny", "--seq-length", "128", "--micro-batch-size", "8", "--global-batch-size", "8",
              "--num-threads", str(a.threads), "--eval-interval", "0"]

    base = os.path.join(w, "base")
    if not os.path.exists(os.path.join(base, "latest_checkpointed_iteration.txt")):
        run([claw, "train", *common, "--train-iters", str(a.base_steps), "--save", base], os.path.join(w, "base.log"))
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sft_task.py"), "--task", "reverse", "--train",
                    "4000", "--test", "200", "--out", os.path.join(w, "task")], check=True)
    prefix = os.path.join(w, "reverse")
    run([claw, "preprocess", "--input", os.path.join(w, "task", "train.jsonl"), "--output-prefix", prefix, "--sft",
         "--chat-template", "plain"], os.path.join(w, "preprocess.log"))
    tests = [json.loads(l) for l in open(os.path.join(w, "task", "test.jsonl"))]

    every = a.sft_steps // a.points
    rows = []
    acc, sample = accuracy(claw, base, a.base_steps, tests, a.threads, os.path.join(w, "serve.log"))
    rows.append({"model": "base (pretrained)", "step": 0, "accuracy": acc, "sample": sample})
    log(rows[-1])
    runs = {}
    # Full fine-tuning; LoRA on every linear layer (a larger learning rate,
    # as adapters usually take); LoRA with the tied embeddings (gpt2-tiny's
    # output layer) training too, as PEFT's modules_to_save does.
    lora = ["--lora-rank", str(a.lora_rank), "--lora-alpha", str(2 * a.lora_rank)]
    choices = {"full": ("SFT full", ["--lr", "1e-3", "--min-lr", "1e-4"]),
               "lora": (f"SFT LoRA r={a.lora_rank}", [*lora, "--lr", "5e-3", "--min-lr", "5e-4"]),
               "lora-save": (f"SFT LoRA r={a.lora_rank} + embeddings",
                             [*lora, "--lora-modules-to-save", "embedding.*", "--lr", "1e-3", "--min-lr", "1e-4"])}
    for tag in a.runs.split(","):
        name, flags = choices[tag]
        ck = os.path.join(w, tag)
        t0 = time.time()
        out = run([claw, "train", *common, "--load", base, "--finetune", "--data-path", prefix + "_sft_document",
                   "--sft", "--split", "1,0,0", "--train-iters", str(a.sft_steps), *flags, "--lr-warmup-iters", "20",
                   "--save", ck, "--save-interval", str(every), "--metrics-file", os.path.join(w, f"{tag}.jsonl")],
                  os.path.join(w, f"{tag}.log"))
        rss = re.search(r"peak RSS ([0-9.]+ \w+)", out)
        runs[name] = {"seconds": time.time() - t0, "peak_rss": rss.group(1) if rss else None}
        losses = [json.loads(l)["loss"] for l in open(os.path.join(w, f"{tag}.jsonl"))]
        for step in range(every, a.sft_steps + 1, every):
            acc, sample = accuracy(claw, ck, step, tests, a.threads, os.path.join(w, "serve.log"))
            rows.append({"model": name, "step": step, "accuracy": acc, "sample": sample, "loss": losses[step - 1]})
            log(rows[-1])
    json.dump({"rows": rows, "runs": runs, "test_prompt": tests[0]["messages"][-2]["content"],
               "test_answer": tests[0]["messages"][-1]["content"]}, open(a.out, "w"), indent=1)
    print(f"Held-out: {len(tests)} conversations; first: '{tests[0]['messages'][-2]['content']}' -> "
          f"'{tests[0]['messages'][-1]['content']}'.\n")
    print("| model | SFT step | training loss | exact match | reply to the first held-out prompt |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        loss = f"{r['loss']:.3f}" if "loss" in r else "-"
        print(f"| {r['model']} | {r['step']} | {loss} | {100 * r['accuracy']:.1f}% | `{r['sample'].strip()}` |")
    for name, r in runs.items():
        print(f"\n{name}: {a.sft_steps} steps in {r['seconds']:.0f} s, peak RSS {r['peak_rss']}")


if __name__ == "__main__":
    main()
