"""GRPO with `claw rl`: does it learn, and does asynchrony pay?

    /usr/bin/python3 bench/drivers/bench_rl.py --claw build/bin/claw [--part learn,async] [--workdir /tmp/claw-bench-rl]

learn: gpt2-tiny pretrained on the built-in corpus (300 steps), taught the
reversal task by SFT on lists of 3 to 5 words (scripts/sft_task.py,
--sft-steps), then trained with GRPO on lists of --rl-words words (default
2: a length SFT never showed it) with the reward of the `reverse` checker
(the share of words in the right place, 1 only for the exact reversal); the
held-out mean reward and exact-match rate of greedy replies to unseen lists
every --eval-interval steps. Writes bench/results/rl_learning.png (reward against
step) and prints a markdown table.

async: the same start, one learner and --workers rollout workers (each
count in the list) under mpirun, one thread a rank, synchronous against
--async --max-staleness 1 with the same seeds, on lists of --async-words
words (the SFT's own lengths): samples per second (completions trained on
per second of wall clock), the time the learner waits for rollouts, and the
reward per step; the reward against wall-clock time and against the step
in bench/results/rl_async.png. On a 2-core machine 1 + 1 ranks fill the cores and
1 + 2 oversubscribe them (an asynchronous learner then shares its core).

Figures go to --out as JSON. The pretrained base and the SFT checkpoint
are kept in the work directory and reused.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(cmd, log):
    print("+", " ".join(cmd), flush=True)
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        sys.stdout.write(open(log).read()[-3000:])
        sys.exit(f"failed: {' '.join(cmd)}")
    return open(log).read()


def records(path):
    return [json.loads(line) for line in open(path)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claw", required=True)
    ap.add_argument("--workdir", default="/tmp/claw-bench-rl")
    ap.add_argument("--part", default="learn,async")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--base-steps", type=int, default=300)
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--rl-steps", type=int, default=120)
    ap.add_argument("--rl-words", default="2-2", help="list lengths of the GRPO prompts, MIN-MAX")
    ap.add_argument("--eval-interval", type=int, default=10)
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--async-steps", type=int, default=40)
    ap.add_argument("--workers", default="1,2", help="rollout workers beside the learner (async part), a list")
    ap.add_argument("--async-words", default="3-5", help="list lengths of the async part's prompts")
    ap.add_argument("--async-max-new-tokens", type=int, default=32)
    ap.add_argument("--nice-workers", type=int, default=0,
                    help="async part: start the rollout workers under `nice -n N` (MPMD), so that on fewer cores "
                         "than ranks the learner does not wait for a core")
    ap.add_argument("--learner-batch-invariant", action="store_true",
                    help="async part: the learners' forward in the engine's kernels (claw rl's flag); the table only, "
                         "no plot")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "results", "rl_results.json"))
    a = ap.parse_args()
    claw = os.path.abspath(a.claw)
    w = a.workdir
    os.makedirs(w, exist_ok=True)
    parts = a.part.split(",")

    base = os.path.join(w, "base")
    if not os.path.exists(os.path.join(base, "latest_checkpointed_iteration.txt")):
        run([claw, "train", "--model", "gpt2-tiny", "--seq-length", "128", "--micro-batch-size", "8",
             "--global-batch-size", "8", "--num-threads", str(a.threads), "--eval-interval", "0", "--train-iters",
             str(a.base_steps), "--save", base], os.path.join(w, "base.log"))
    task = os.path.join(w, "task")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sft_task.py"), "--task", "reverse", "--train",
                    "4000", "--test", "100", "--out", task], check=True)
    sft = os.path.join(w, f"sft{a.sft_steps}")
    if not os.path.exists(os.path.join(sft, "latest_checkpointed_iteration.txt")):
        prefix = os.path.join(w, "reverse")
        run([claw, "preprocess", "--input", os.path.join(task, "train.jsonl"), "--output-prefix", prefix, "--sft",
             "--chat-template", "plain"], os.path.join(w, "preprocess.log"))
        run([claw, "train", "--model", "gpt2-tiny", "--seq-length", "128", "--micro-batch-size", "8",
             "--global-batch-size", "8", "--num-threads", str(a.threads), "--eval-interval", "0", "--load", base,
             "--finetune", "--data-path", prefix + "_sft_document", "--sft", "--split", "1,0,0", "--train-iters",
             str(a.sft_steps), "--lr", "1e-3", "--min-lr", "1e-4", "--lr-warmup-iters", "20", "--save", sft],
            os.path.join(w, "sft.log"))
    rl_task = os.path.join(w, "task_rl")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sft_task.py"), "--task", "reverse", "--words",
                    a.rl_words, "--train", "600", "--test", "100", "--seed", "2", "--out", rl_task], check=True)
    G = a.num_generations
    gb = a.prompts_per_step * G
    common = ["--load", sft, "--finetune", "--prompt-data", os.path.join(rl_task, "train.jsonl"), "--task", "reverse",
              "--global-batch-size", str(gb), "--micro-batch-size", str(min(gb, 16)), "--num-generations", str(G),
              "--seq-length", "48", "--max-new-tokens", "16", "--lr", str(a.lr), "--seed", "7"]
    results = json.load(open(a.out)) if os.path.exists(a.out) else {}

    if "learn" in parts:
        m = os.path.join(w, "learn.jsonl")
        t0 = time.time()
        run([claw, "rl", *common, "--eval-prompt-data", os.path.join(rl_task, "test.jsonl"), "--train-iters",
             str(a.rl_steps), "--eval-interval", str(a.eval_interval), "--num-threads", str(a.threads),
             "--metrics-file", m], os.path.join(w, "learn.log"))
        recs = records(m)
        curve = [{"step": r["eval_version"], "eval_reward": r["eval_reward"], "eval_exact_match": r["eval_exact_match"]}
                 for r in recs if "eval_reward" in r]
        results["learn"] = {"seconds": time.time() - t0, "curve": curve, "rl_words": a.rl_words,
                            "train_reward": [r["reward"] for r in recs], "lr": a.lr, "sft_steps": a.sft_steps,
                            "prompts_per_step": a.prompts_per_step, "num_generations": G}
        print("\n| GRPO step | held-out mean reward | held-out exact match |\n|---:|---:|---:|")
        for c in curve:
            print(f"| {c['step']} | {c['eval_reward']:.3f} | {100 * c['eval_exact_match']:.1f}% |")
        plot_learning(results["learn"], os.path.join(HERE, "..", "results", "rl_learning.png"))

    if "async" in parts:
        async_task = os.path.join(w, "task_async")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sft_task.py"), "--task", "reverse", "--words",
                        a.async_words, "--train", "600", "--test", "10", "--seed", "3", "--out", async_task], check=True)
        base_flags = [*common]
        base_flags[base_flags.index("--prompt-data") + 1] = os.path.join(async_task, "train.jsonl")
        base_flags[base_flags.index("--seq-length") + 1] = str(40 + a.async_max_new_tokens)
        base_flags[base_flags.index("--max-new-tokens") + 1] = str(a.async_max_new_tokens)
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        layouts = {}
        for workers in [int(x) for x in a.workers.split(",")]:
            runs = {}
            for name, flags in (("sync", []), ("async K=1", ["--async", "--max-staleness", "1"])):
                m = os.path.join(w, f"async_{workers}w_{name.split()[0]}{'_bi' if a.learner_batch_invariant else ''}.jsonl")
                args = [*base_flags, "--train-iters", str(a.async_steps), "--eval-interval", "0", "--num-threads", "1",
                        "--rollout-workers", str(workers), *flags, "--metrics-file", m,
                        *(["--learner-batch-invariant"] if a.learner_batch_invariant else [])]
                if a.nice_workers:  # MPMD: the learner as it is, the workers at a lower priority
                    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "1", claw, "rl", *args, ":",
                           "-np", str(workers), "nice", "-n", str(a.nice_workers), claw, "rl", *args]
                else:
                    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(1 + workers), claw, "rl",
                           *args]
                print("+", " ".join(cmd), flush=True)
                t0 = time.time()
                with open(m + ".log", "w") as f:
                    subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, check=True)
                wall = time.time() - t0
                recs = records(m)
                # Throughput after the first step (which waits for a first batch in both).
                span = recs[-1]["elapsed_s"] - recs[0]["elapsed_s"]
                runs[name] = {"wall_s": wall, "samples_per_s": (len(recs) - 1) * gb / span,
                              "reward": [r["reward"] for r in recs], "elapsed": [r["elapsed_s"] for r in recs],
                              "rollout_wait_s": sum(r["rollout_wait_s"] for r in recs[1:]) / (len(recs) - 1),
                              "train_s": sum(r["train_s"] for r in recs[1:]) / (len(recs) - 1),
                              "staleness_max": max(r["staleness_max"] for r in recs),
                              "completion_length": sum(r["completion_length"] for r in recs) / len(recs)}
            layouts[f"1 learner + {workers} worker{'s' if workers > 1 else ''}"] = runs
        results["async"] = {"steps": a.async_steps, "words": a.async_words, "cpus": os.cpu_count(),
                            "max_new_tokens": a.async_max_new_tokens, "layouts": layouts}
        print(f"\n| ranks | run | samples/s | learner wait for rollouts (s/step) | train (s/step) | "
              f"completion tokens | mean reward | max age | async / sync |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for layout, runs in layouts.items():
            s, x = runs["sync"], runs["async K=1"]
            for name, r in runs.items():
                gain = f"{x['samples_per_s'] / s['samples_per_s']:.2f}x" if r is x else ""
                print(f"| {layout} | {name} | {r['samples_per_s']:.2f} | {r['rollout_wait_s']:.2f} | "
                      f"{r['train_s']:.2f} | {r['completion_length']:.1f} | "
                      f"{sum(r['reward']) / len(r['reward']):.4f} | {r['staleness_max']} | {gain} |")
        if not a.learner_batch_invariant:
            plot_async(layouts, os.path.join(HERE, "..", "results", "rl_async.png"))
    json.dump(results, open(a.out, "w"), indent=1)


def plot_learning(r, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.6))
    steps = [c["step"] for c in r["curve"]]
    ax.plot(steps, [c["eval_reward"] for c in r["curve"]], "o-", label="held-out mean reward (greedy)")
    ax.plot(steps, [c["eval_exact_match"] for c in r["curve"]], "s--", label="held-out exact match")
    tr = r["train_reward"]
    ax.plot(range(1, len(tr) + 1), tr, alpha=0.35, label="training batch mean reward (sampled)")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reward")
    ax.set_title(f"claw rl: gpt2-tiny reversing {r['rl_words']} words (SFT on 3-5, {r['sft_steps']} steps)",
                 fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_async(layouts, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for layout, runs in layouts.items():
        for name, r in runs.items():
            label = f"{layout}, {name}: {r['samples_per_s']:.1f} samples/s"
            axes[0].plot(r["elapsed"], r["reward"], ".-", label=label)
            axes[1].plot(range(1, len(r["reward"]) + 1), r["reward"], ".-", label=label)
    axes[0].set_xlabel("wall-clock seconds")
    axes[1].set_xlabel("learner step")
    for ax in axes:
        ax.set_ylabel("training batch mean reward")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("claw rl: synchronous vs --async (max staleness 1), same seeds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
