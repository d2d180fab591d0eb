"""Does DPO learn a preference? The SFT model of bench/drivers/bench_sft.py (gpt2-tiny
pretrained on the built-in corpus, then fine-tuned to reverse 3-5 words)
trained with `claw train --dpo` on preference pairs of the same task
(scripts/sft_task.py --preference: the right reversal chosen, the same with
one word replaced by a word the prompt does not have rejected), in full and
with LoRA. Scored on the 200 held-out prompts (never seen in SFT or DPO):
preference accuracy (the share of pairs whose chosen reward beta (log pi -
log pi_ref) beats the rejected one's) and the mean reward margin, along
training.

    /usr/bin/python3 bench/drivers/bench_dpo.py --claw build/bin/claw [--steps 200] [--workdir /tmp/claw-bench-sft]

Runs bench/drivers/bench_sft.py first when the work directory has no SFT model.
Prints a markdown table (for bench/RESULTS.md) and writes the figures to
--out as JSON.
"""
import argparse
import json
import os
import subprocess
import sys

from bench_sft import run

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claw", default="build/bin/claw")
    ap.add_argument("--workdir", default="/tmp/claw-bench-sft")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "results", "dpo_results.json"))
    a = ap.parse_args()
    claw, w = os.path.abspath(a.claw), a.workdir
    sft_model = os.path.join(w, "full")
    if not os.path.exists(os.path.join(sft_model, "latest_checkpointed_iteration.txt")):
        subprocess.run([sys.executable, os.path.join(HERE, "bench_sft.py"), "--claw", claw, "--workdir", w,
                        "--threads", str(a.threads)], check=True)
    # The SFT task's own conversations (same seed and sizes), as pairs: the
    # held-out 200 are bench_sft's held-out ones.
    task = os.path.join(w, "dpo_task")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sft_task.py"), "--task", "reverse", "--train",
                    "4000", "--test", "200", "--preference", "--out", task], check=True)
    prefix = os.path.join(w, "reverse_pref")
    run([claw, "preprocess", "--input", os.path.join(task, "pairs.jsonl"), "--output-prefix", prefix, "--dpo",
         "--chat-template", "plain"], os.path.join(w, "dpo_preprocess.log"))
    # --split 20,1,0: the first 4000 pairs train, the last 200 (held out) validate.
    common = ["--model", "gpt2-tiny", "--load", sft_model, "--finetune", "--data-path", prefix + "_dpo_document",
              "--dpo", "--dpo-beta", str(a.beta), "--split", "20,1,0", "--seq-length", "32",
              "--micro-batch-size", "8", "--global-batch-size", "16", "--train-iters", str(a.steps),
              "--eval-interval", str(max(1, a.steps // 8)), "--eval-iters", "25", "--lr-warmup-iters", "10",
              "--num-threads", str(a.threads), "--log-interval", "25"]
    results = {}
    for name, flags in (("DPO full", ["--lr", "1e-4", "--min-lr", "1e-5"]),
                        ("DPO LoRA r=16", ["--lora-rank", "16", "--lora-alpha", "32", "--lr", "1e-3",
                                           "--min-lr", "1e-4"])):
        tag = name.split()[1].split("=")[0].lower()
        metrics = os.path.join(w, f"dpo_{tag}.jsonl")
        out = run([claw, "train", *common, *flags, "--metrics-file", metrics], os.path.join(w, f"dpo_{tag}.log"))
        rows = [json.loads(l) for l in open(metrics)]
        curve = [(r["step"], r["val_rewards/accuracies"], r["val_rewards/margins"], r["val_loss"])
                 for r in rows if "val_rewards/accuracies" in r]
        ref_line = next((l for l in out.splitlines() if "reference log-probabilities" in l), "")
        results[name] = {"curve": curve, "train_loss_last": rows[-1]["loss"], "reference": ref_line.strip()}
    print(f"| run (beta {a.beta}, {a.steps} steps of 8 pairs) | step | held-out accuracy | held-out margin | "
          f"held-out DPO loss |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        for step, acc, margin, loss in r["curve"]:
            print(f"| {name} | {step} | {100 * acc:.1f}% | {margin:.3f} | {loss:.4f} |")
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
