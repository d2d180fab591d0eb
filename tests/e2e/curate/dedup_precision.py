"""Precision and recall of `claw curate`'s MinHash deduplication against
exact Jaccard ground truth, on the built-in text with planted near
duplicates around the threshold (0.8).

    dedup_precision.py CLAW_BINARY [--originals 500] [--seed 1]

Corpus: the State of the Union addresses (CLAW_DATA_DIR/sotu/*.txt),
lowercased to runs of ASCII letters, cut into documents of 150 words. Each
of `--originals` documents gets 0-3 relatives: exact copies, copies with k
word substitutions (k in 1..8: Jaccard of the 5-gram sets from ~0.94 down
to ~0.55) and edits of those edits (chains: a ~ b ~ c with a and c apart).
The documents are shuffled. claw's simplification leaves such text as it
is, so the 5-word shingles here are claw's (as tuples, not hashes).

Ground truth: every pair with exact Jaccard >= 0.8 (found through an
inverted index of the shingles); the ideal removals take them in document
order, each document removed for the lowest-numbered kept document it
reaches 0.8 with. A removal is correct when the document's Jaccard with the
one it names (`duplicate_of`) is >= 0.8.

Checked: with verification (the default) precision >= 0.99 and recall
>= 0.95; without it (`verify = false`: every LSH candidate, union-find)
precision is printed, and below 0.99 on this corpus (what the pass fixes).
The wall time of both runs is printed (docs/s in bench/results/curation.md).
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

THRESHOLD = 0.8
NGRAM = 5
WORDS = 150


def shingles(words):
    return {tuple(words[i:i + NGRAM]) for i in range(len(words) - NGRAM + 1)}


def jaccard(a, b):
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def corpus(data_dir, originals, seed):
    rng = random.Random(seed)
    words = []
    for path in sorted(glob.glob(os.path.join(data_dir, "sotu", "*.txt"))):
        words += re.findall(r"[a-z]+", open(path, encoding="utf-8").read().lower())
    if len(words) < WORDS * originals * 2:
        sys.exit(f"FAIL: {data_dir}/sotu holds {len(words)} words: run scripts/fetch-data")
    vocab = sorted(set(words))
    starts = rng.sample(range(0, len(words) // WORDS - 1), originals)
    docs = []

    def edit(ws, k):
        ws = list(ws)
        for i in rng.sample(range(len(ws)), k):
            ws[i] = rng.choice(vocab)
        return ws

    for s in starts:
        base = words[s * WORDS:(s + 1) * WORDS]
        docs.append(base)
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            kind = rng.random()
            if kind < 0.1:
                docs.append(list(base))
            elif kind < 0.75:
                docs.append(edit(base, rng.randint(1, 8)))
            else:  # a chain: an edit of an edit
                docs.append(edit(edit(base, rng.randint(2, 4)), rng.randint(2, 4)))
    rng.shuffle(docs)
    return [" ".join(d) for d in docs]


def ground_truth(sets):
    """Pairs (hi, lo) with Jaccard >= THRESHOLD, and the ideal removals."""
    index = {}
    for d, s in enumerate(sets):
        for x in s:
            index.setdefault(x, []).append(d)
    edges = set()
    for d, s in enumerate(sets):
        seen = set()
        for x in s:
            for o in index[x]:
                if o < d and o not in seen:
                    seen.add(o)
                    if jaccard(s, sets[o]) >= THRESHOLD:
                        edges.add((d, o))
    removed = {}
    for d, o in sorted(edges):
        if d not in removed and o not in removed:
            removed[d] = o
    return edges, removed


def run_claw(claw, docs, work, verify):
    inp = os.path.join(work, "docs.jsonl")
    with open(inp, "w") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": str(i), "text": d}) + "\n")
    out = os.path.join(work, f"out_{verify}")
    shutil.rmtree(out, ignore_errors=True)  # a second run would resume the first
    toml = os.path.join(work, f"p_{verify}.toml")
    with open(toml, "w") as f:
        f.write(f'[input]\npaths = ["{inp}"]\n[output]\ndir = "{out}"\ncompression = "none"\n'
                f'[[stage]]\nkind = "minhash_dedup"\nverify = {"true" if verify else "false"}\n')
    t0 = time.time()
    r = subprocess.run([claw, "curate", "--config", toml, "--threads", "2"], capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        sys.exit(f"FAIL: claw curate exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    # The stage's own row of the summary: docs in, out, MB in, out, seconds, docs/s/thread.
    row = re.search(r"^\d+\s+minhash_dedup\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s+(\S+)", r.stdout, re.M)
    stage_s = float(row.group(3)) if row else float("nan")
    removed = {}
    for path in glob.glob(os.path.join(out, "removed", "*.jsonl")):
        for line in open(path):
            rec = json.loads(line)
            removed[int(rec["id"])] = int(rec["curate"]["duplicate_of"])
    return removed, wall, stage_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("claw")
    ap.add_argument("--originals", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each mode; the best wall time is printed")
    a = ap.parse_args()
    data_dir = os.environ.get("CLAW_DATA_DIR") or sys.exit("FAIL: CLAW_DATA_DIR must name the built-in data")
    docs = corpus(data_dir, a.originals, a.seed)
    sets = [shingles(d.split()) for d in docs]
    edges, ideal = ground_truth(sets)
    near = sum(1 for d, o in edges if jaccard(sets[d], sets[o]) < 0.9)
    print(f"corpus: {len(docs)} documents from the built-in text, {len(edges)} pairs at Jaccard >= {THRESHOLD} "
          f"({near} of them below 0.9); ideal removals {len(ideal)}")
    with tempfile.TemporaryDirectory() as work:
        results = {}
        for verify in (True, False):
            walls, stages = [], []
            for _ in range(a.repeat):
                removed, wall, stage_s = run_claw(a.claw, docs, work, verify)
                walls.append(wall)
                stages.append(stage_s)
            wall, stage_s = min(walls), min(stages)
            correct = sum(1 for d, k in removed.items() if jaccard(sets[d], sets[k]) >= THRESHOLD)
            precision = correct / len(removed) if removed else 1.0
            recall = len(set(removed) & set(ideal)) / len(ideal)
            worst = min((jaccard(sets[d], sets[k]) for d, k in removed.items()), default=1.0)
            results[verify] = (precision, recall)
            print(f"verify = {str(verify).lower()}: {len(removed)} removed, precision {precision:.4f} "
                  f"({len(removed) - correct} below {THRESHOLD}, the lowest {worst:.3f}), recall {recall:.4f}; "
                  f"{wall:.2f} s wall ({len(docs) / wall:.0f} docs/s), the stage {stage_s:.3f} s "
                  f"({len(docs) / stage_s:.0f} docs/s on 2 threads)")
    p, r = results[True]
    assert p >= 0.99 and r >= 0.95, f"with verification: precision {p:.4f} (>= 0.99), recall {r:.4f} (>= 0.95)"
    assert results[False][0] < 0.99, "without verification the corpus should show false removals"
    print("PASS")


if __name__ == "__main__":
    main()
