#!/usr/bin/env python3
"""Synthetic instruction tasks for supervised fine-tuning: chat JSONL with
held-out examples, for checking that SFT teaches a model something it could
not do before (bench/drivers/bench_sft.py) and for the SFT layout tests.

    scripts/sft_task.py --task reverse --train 4000 --test 200 --out DIR [--seed 1] [--preference]

Writes DIR/train.jsonl and DIR/test.jsonl, one conversation per line:
    {"messages": [{"role": "user", "content": "Reverse: cat sun tree"},
                  {"role": "assistant", "content": "tree sun cat"}]}
A third of the conversations open with a system prompt. Tasks:
    reverse  3 to 5 words (--words MIN-MAX; from 32 short words) in reverse order
    add      the sum of two numbers below 50
Test examples never appear in the training set.

With --preference the lines are DPO preference pairs instead (claw
preprocess --dpo), the right answer chosen and a wrong one rejected:
    {"prompt": [{"role": "user", "content": "Reverse: cat sun tree"}],
     "chosen": "tree sun cat", "rejected": "cat sun tree"}
(reverse: the words left as given; add: the sum off by 1 to 10), and DIR/pairs.jsonl holds the training pairs then the held-out
ones, for one dataset whose --split puts the held-out pairs in validation.
"""
import argparse
import json
import os
import random

WORDS = ("cat dog sun tree car book red blue fish bird milk rain star moon road ship "
         "king door hand cup box pen hat bed egg map key ice sea sky web fox").split()
SYSTEM = ["You are a helpful assistant.", "Answer with the result only."]


def example(task, rng, words_range=(3, 5)):
    if task == "reverse":
        words = rng.sample(WORDS, rng.randint(*words_range))
        return "Reverse: " + " ".join(words), " ".join(reversed(words))
    a, b = rng.randrange(50), rng.randrange(50)
    return f"Add: {a} + {b}", str(a + b)


def wrong(task, question, answer, rng):
    if task == "reverse":  # the words as given: the task not done
        return question.split(" ", 1)[1]
    return str(int(answer) + rng.choice([-1, 1]) * rng.randint(1, 10))


def conversation(task, rng, words_range=(3, 5)):
    q, a = example(task, rng, words_range)
    messages = [{"role": "system", "content": rng.choice(SYSTEM)}] if rng.random() < 1 / 3 else []
    messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return messages


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=["reverse", "add"], default="reverse")
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--test", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--preference", action="store_true", help="DPO pairs (prompt, chosen, rejected)")
    ap.add_argument("--words", default="3-5", help="reverse: how many words a list has, MIN-MAX")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    lo, hi = (int(x) for x in a.words.split("-"))
    words_range = (lo, hi)
    os.makedirs(a.out, exist_ok=True)
    test, seen = [], set()
    while len(test) < a.test:
        m = conversation(a.task, rng, words_range)
        if m[-2]["content"] not in seen:
            seen.add(m[-2]["content"])
            test.append(m)
    train = []
    while len(train) < a.train:
        m = conversation(a.task, rng, words_range)
        if m[-2]["content"] not in seen:
            train.append(m)
    def line(m):
        if not a.preference:
            return json.dumps({"messages": m})
        return json.dumps({"prompt": m[:-1], "chosen": m[-1]["content"],
                           "rejected": wrong(a.task, m[-2]["content"], m[-1]["content"], rng)})

    lines = {"train": [line(m) for m in train], "test": [line(m) for m in test]}
    if a.preference:
        lines["pairs"] = lines["train"] + lines["test"]
    for name, rows in lines.items():
        with open(os.path.join(a.out, f"{name}.jsonl"), "w") as f:
            f.writelines(r + "\n" for r in rows)
    kind = "preference pairs" if a.preference else "conversations"
    print(f"{a.task}: {len(train)} training and {len(test)} held-out {kind} in {a.out}")


if __name__ == "__main__":
    main()
