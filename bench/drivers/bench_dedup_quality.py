"""Dedup quality of `claw curate` (src/claw/curate/dedup.h) against
datasketch's MinHashLSH, on real text with planted duplicates of known
Jaccard similarity.

  /tmp/claw-curate-venv/bin/python bench/drivers/bench_dedup_quality.py --driver <curate_dedup_driver>
      [--sotu data/sotu.jsonl] [--planted 1000] [--seed 1] [--bands 14] [--rows 8] [--ngram 5]

The venv needs datasketch (and, for the speed reference, datatrove with
xxhash<4, regex, tokenizers, spacy):
  python3 -m venv /tmp/claw-curate-venv && /tmp/claw-curate-venv/bin/pip install datasketch \\
      datatrove 'xxhash<4' regex tokenizers spacy

Corpus: the State of the Union addresses split into documents of 100-1000
words (runs of whole sentences). A random set of them gets a planted copy
each: exact copies, copies with white space and case changed, and edited
copies whose word-level edit rate (substitutions, deletions, insertions of
corpus words) is chosen for a target shingle Jaccard J drawn from
[0.45, 1]: a word edit breaks about `ngram` shingles, so the fraction s of
surviving shingles is ~ (1 - p)^ngram and J = s / (2 - s). The true
Jaccard of every planted pair is then measured on the shingle sets.

Shingles: this script reimplements the driver's simplification and word
n-grams (minhash.h) and checks, document by document, that its shingle
hashes (XXH3-64 of the n-gram text) equal the driver's (`--mode
shingles`); datasketch gets those same shingles.

Methods, each turned into clusters with union-find and scored on pairs
(every pair inside a cluster is predicted a duplicate; the positives at a
target t are all pairs with true Jaccard >= t, found through an inverted
index of the shingles, planted or not):
  exact       driver --mode exact (whitespace_lowercase)
  claw lsh    driver --mode minhash, threshold 0 (every LSH candidate)
  claw lsh+v  driver --mode minhash --threshold t (estimated Jaccard >= t)
  ds lsh      datasketch MinHashLSH(num_perm = bands*rows, params = (bands, rows))
  ds lsh+v    the same, candidate pairs kept when MinHash.jaccard >= t

Then the detection rate of the planted pairs by true-Jaccard bin beside
the LSH theory 1 - (1 - s^rows)^bands (averaged over the bin's pairs), and
the speed of each single-threaded: the driver's own timing of add() +
finish() (JSON parsing excluded); datasketch's MinHash + LSH insert +
query, without and with this script's Python shingling; datatrove's
MinhashDedupSignature.get_shingles + get_signature (its stage 1) on a
subset.
"""
import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections import defaultdict

import xxhash
from datasketch import MinHash, MinHashLSH

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# ---------------------------------------------------------------------------
# Shingling, as in src/claw/curate/minhash.cc

DECIMAL_SEPARATORS = set(".,\u060c\u066b\u2396\u2397\u2398")
WORD_CATEGORIES = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mc", "Me", "Nl", "No", "Co", "Cn"}
ASCII_NUMBER = re.compile(r"[0-9]+(?:[.,][0-9]+)?")
ASCII_WORD = re.compile(r"[a-z0-9]+")


def char_kind(ch):
    if ch.isspace():
        return "sep"
    cat = unicodedata.category(ch)
    if cat in ("Mn", "Cf"):
        return "drop"
    if cat == "Nd":
        return "digit"
    if cat in WORD_CATEGORIES:
        return "word"
    return "sep"


def fold(ch):
    low = ch.lower()
    m = low[0] if low else ch
    bases = [c for c in unicodedata.normalize("NFD", m) if unicodedata.category(c) != "Mn"]
    return bases[0] if len(bases) == 1 else m


def simplified_words(text):
    if text.isascii():  # the fast path, equal to the general one on ASCII
        return ASCII_WORD.findall(ASCII_NUMBER.sub("0", text.lower()))
    words, cur, i, n = [], [], 0, len(text)

    def end_word():
        if cur:
            words.append("".join(cur))
            cur.clear()

    while i < n:
        ch = text[i]
        kind = char_kind(ch)
        if kind == "drop":
            i += 1
        elif kind == "sep":
            end_word()
            i += 1
        elif kind == "digit":
            cur.append("0")
            while i < n and char_kind(text[i]) == "digit":
                i += 1
            if i + 1 < n and text[i] in DECIMAL_SEPARATORS and char_kind(text[i + 1]) == "digit":
                i += 1
                while i < n and char_kind(text[i]) == "digit":
                    i += 1
        else:
            cur.append(fold(ch))
            i += 1
    end_word()
    return words


def shingle_strings(text, ngram):
    w = simplified_words(text)
    return [" ".join(w[i:i + ngram]) for i in range(len(w) - ngram + 1)]


def shingle_hashes(text, ngram):
    return [xxhash.xxh3_64_intdigest(s.encode()) for s in shingle_strings(text, ngram)]


def jaccard(a, b):
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def lsh_probability(s, bands, rows):
    return 1.0 - (1.0 - s ** rows) ** bands


# ---------------------------------------------------------------------------
# Corpus

SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def build_corpus(sotu, rng):
    docs = []
    with open(sotu) as f:
        for line in f:
            sentences = SENTENCE_END.split(json.loads(line)["text"])
            cur, words, target = [], 0, rng.randint(100, 1000)
            for s in sentences:
                cur.append(s)
                words += len(s.split())
                if words >= target:
                    docs.append(" ".join(cur))
                    cur, words, target = [], 0, rng.randint(100, 1000)
            if words >= 100:
                docs.append(" ".join(cur))
    return docs


def edit_words(tokens, p, vocab, rng):
    out = []
    for t in tokens:
        if rng.random() >= p:
            out.append(t)
            continue
        op = rng.random()
        if op < 0.6:
            out.append(rng.choice(vocab))
        elif op < 0.8:
            pass  # deleted
        else:
            out.append(t)
            out.append(rng.choice(vocab))
    return out


def plant(originals, n_planted, ngram, rng):
    """Returns docs (originals + copies) and planted pairs (orig, copy, kind)."""
    vocab = [t for d in originals[:300] for t in d.split()]
    docs = list(originals)
    pairs = []
    for idx in rng.sample(range(len(originals)), n_planted):
        orig = originals[idx]
        r = rng.random()
        if r < 0.10:
            kind, copy = "exact", orig
        elif r < 0.15:
            kind = "space_case"
            copy = "  " + "\n".join(orig.upper().split(" ")) + " \t"
        else:
            kind = "edited"
            target = rng.uniform(0.45, 1.0)
            s = 2 * target / (1 + target)
            p = 1 - s ** (1 / ngram)
            copy = " ".join(edit_words(orig.split(), p, vocab, rng))
        docs.append(copy)
        pairs.append((idx, len(docs) - 1, kind))
    return docs, pairs


# ---------------------------------------------------------------------------
# Clusters and scores


class UnionFind:
    def __init__(self, n):
        self.parent = list(range(n))

    def find(self, x):
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a, b):
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)


def clusters_of(n, edges):
    uf = UnionFind(n)
    for a, b in edges:
        uf.union(a, b)
    return [uf.find(i) for i in range(n)]


def cluster_pairs(roots):
    groups = defaultdict(list)
    for i, r in enumerate(roots):
        groups[r].append(i)
    out = set()
    for members in groups.values():
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                out.add((members[i], members[j]))
    return out


def similar_pairs(sets, min_j, max_df=50):
    """Every pair with Jaccard >= min_j, through an inverted index of the
    shingles that occur in at most max_df documents."""
    index = defaultdict(list)
    for d, s in enumerate(sets):
        for h in s:
            index[h].append(d)
    shared = defaultdict(int)
    for docs in index.values():
        if 2 <= len(docs) <= max_df:
            for i in range(len(docs)):
                for j in range(i + 1, len(docs)):
                    shared[(docs[i], docs[j])] += 1
    out = {}
    for (a, b), c in shared.items():
        # J >= min_j needs |A ∩ B| >= min_j * max(|A|, |B|); rare shingles are most of them.
        if c >= 0.5 * min_j * max(len(sets[a]), len(sets[b])):
            j = jaccard(sets[a], sets[b])
            if j >= min_j:
                out[(a, b)] = j
    return out


# ---------------------------------------------------------------------------
# Runs


def run_driver(driver, corpus_path, args, extra):
    cmd = [driver, "--threads", "1", "--ngram", str(args.ngram), "--bands", str(args.bands), "--rows",
           str(args.rows), "--workdir", tempfile.gettempdir()] + extra
    with open(corpus_path) as f:
        res = subprocess.run(cmd, stdin=f, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {res.stderr}")
    stats = dict(kv.split("=", 1) for kv in res.stderr.split())
    edges = [tuple(int(x) for x in line.split("\t")) for line in res.stdout.splitlines() if line]
    return edges, stats


def best_driver_speed(driver, corpus_path, args, extra, repeats=3):
    best = None
    for _ in range(repeats):
        _, st = run_driver(driver, corpus_path, args, extra)
        if best is None or float(st["seconds"]) < float(best["seconds"]):
            best = st
    return best


def datasketch_run(shingles, args):
    num_perm = args.bands * args.rows
    t0 = time.perf_counter()
    mhs = []
    for sh in shingles:
        m = MinHash(num_perm=num_perm, seed=args.seed)
        m.update_batch([s.encode() for s in sh])
        mhs.append(m)
    t1 = time.perf_counter()
    lsh = MinHashLSH(num_perm=num_perm, params=(args.bands, args.rows))
    for i, m in enumerate(mhs):
        if shingles[i]:
            lsh.insert(i, m)
    candidates = set()
    for i, m in enumerate(mhs):
        if shingles[i]:
            for j in lsh.query(m):
                if j != i:
                    candidates.add((min(i, j), max(i, j)))
    t2 = time.perf_counter()
    return mhs, candidates, t1 - t0, t2 - t1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", required=True, help="tests/e2e/data/curate_dedup_driver binary")
    ap.add_argument("--sotu", default=os.path.join(ROOT, "data", "sotu.jsonl"))
    ap.add_argument("--planted", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ngram", type=int, default=5)
    ap.add_argument("--bands", type=int, default=14)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--datatrove-docs", type=int, default=300, help="documents for datatrove's speed (0: skip)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    targets = (0.7, 0.8, 0.9)

    originals = build_corpus(args.sotu, rng)
    docs, planted = plant(originals, args.planted, args.ngram, rng)
    n = len(docs)
    nbytes = sum(len(d.encode()) for d in docs)
    print(f"corpus: {len(originals)} documents of 100-1000 words from {os.path.basename(args.sotu)}, "
          f"{len(planted)} planted copies, {n} documents, {nbytes / 1e6:.1f} MB")

    tmp = tempfile.mkdtemp(prefix="bench_dedup_")
    corpus_path = os.path.join(tmp, "corpus.jsonl")
    with open(corpus_path, "w") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, "text": d}) + "\n")

    # Same shingles as the driver, document by document.
    t0 = time.perf_counter()
    shingles = [shingle_strings(d, args.ngram) for d in docs]
    py_shingle_s = time.perf_counter() - t0
    hashes = [[xxhash.xxh3_64_intdigest(s.encode()) for s in sh] for sh in shingles]
    res = subprocess.run([args.driver, "--mode", "shingles", "--ngram", str(args.ngram)], stdin=open(corpus_path),
                         capture_output=True, text=True, check=True)
    mismatched = 0
    for line in res.stdout.splitlines():
        doc_id, count, total = line.split("\t")
        h = hashes[int(doc_id)]
        if len(h) != int(count) or sum(h) % 2**64 != int(total):
            mismatched += 1
    print(f"shingles: {mismatched} of {n} documents differ between this script and the driver")
    if mismatched:
        sys.exit("shingling differs: the comparison would not be on the same shingles")
    sets = [set(h) for h in hashes]

    truth = similar_pairs(sets, min(targets) - 0.2)
    planted_j = [(a, b, kind, jaccard(sets[a], sets[b])) for a, b, kind in planted]

    def true_j(pair):
        return truth[pair] if pair in truth else jaccard(sets[pair[0]], sets[pair[1]])

    # Methods -> predicted pairs (every pair inside a cluster).
    predicted = {}
    exact_edges, exact_stats = run_driver(args.driver, corpus_path, args, ["--mode", "exact"])
    predicted["exact"] = cluster_pairs(clusters_of(n, exact_edges))
    lsh_edges, lsh_stats = run_driver(args.driver, corpus_path, args, ["--mode", "minhash"])
    predicted["claw lsh"] = cluster_pairs(clusters_of(n, lsh_edges))
    verified = {}
    for t in targets:
        e, _ = run_driver(args.driver, corpus_path, args, ["--mode", "minhash", "--threshold", str(t)])
        verified[t] = cluster_pairs(clusters_of(n, e))
    mhs, ds_candidates, ds_minhash_s, ds_lsh_s = datasketch_run(shingles, args)
    predicted["ds lsh"] = cluster_pairs(clusters_of(n, ds_candidates))
    ds_verified = {}
    for t in targets:
        kept = [(a, b) for a, b in ds_candidates if mhs[a].jaccard(mhs[b]) >= t]
        ds_verified[t] = cluster_pairs(clusters_of(n, kept))

    print(f"\nclaw minhash stats: " + " ".join(f"{k}={lsh_stats[k]}" for k in (
        "documents", "no_shingles", "candidate_pairs", "verified_pairs", "clusters", "removed")))
    print(f"datasketch: {len(ds_candidates)} distinct candidate pairs\n")

    print(f"## Precision and recall on pairs ({args.bands} bands x {args.rows} rows, {args.ngram}-grams; "
          f"positives: true Jaccard >= target)\n")
    print("| target | positives | method | predicted pairs | true positives | precision | recall |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for t in targets:
        positives = {p for p, j in truth.items() if j >= t}
        rows = [("exact", predicted["exact"]), ("claw lsh", predicted["claw lsh"]),
                (f"claw lsh+v {t}", verified[t]), ("ds lsh", predicted["ds lsh"]), (f"ds lsh+v {t}", ds_verified[t])]
        for name, pred in rows:
            tp = sum(1 for p in pred if p in positives or true_j(p) >= t)
            prec = tp / len(pred) if pred else float("nan")
            rec = len(positives & pred) / len(positives) if positives else float("nan")
            print(f"| {t} | {len(positives)} | {name} | {len(pred)} | {tp} | {prec:.3f} | {rec:.3f} |")

    print(f"\n## Detection rate of planted pairs by true Jaccard (theory: 1 - (1 - s^{args.rows})^{args.bands}, "
          f"mean over the bin)\n")
    print("| true Jaccard | pairs | theory | claw lsh | datasketch lsh | exact |")
    print("|---|---:|---:|---:|---:|---:|")
    bins = [(0.4, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.0), (1.0, 1.01)]
    for lo, hi in bins:
        members = [(a, b) for a, b, kind, j in planted_j if lo <= j < hi]
        if not members:
            continue
        theory = sum(lsh_probability(jaccard(sets[a], sets[b]), args.bands, args.rows)
                     for a, b in members) / len(members)

        def rate(pred):
            return sum(1 for p in members if p in pred) / len(members)

        label = "1.0 (exact, space/case)" if lo == 1.0 else f"{lo:.1f}-{hi:.1f}"
        print(f"| {label} | {len(members)} | {theory:.3f} | {rate(predicted['claw lsh']):.3f} | "
              f"{rate(predicted['ds lsh']):.3f} | {rate(predicted['exact']):.3f} |")

    # Speed, single thread.
    lsh_speed = best_driver_speed(args.driver, corpus_path, args, ["--mode", "minhash"])
    exact_speed = best_driver_speed(args.driver, corpus_path, args, ["--mode", "exact"])
    print("\n## Speed, one thread\n")
    print("| what | seconds | docs/s | MB/s |")
    print("|---|---:|---:|---:|")

    def row(name, secs, ndocs=n, nb=nbytes):
        print(f"| {name} | {secs:.3f} | {ndocs / secs:,.0f} | {nb / secs / 1e6:.2f} |")

    row("claw minhash (shingle + signature + LSH + clusters)", float(lsh_speed["seconds"]))
    row("claw exact (normalise + XXH3-128 + sort)", float(exact_speed["seconds"]))
    ds_s = ds_minhash_s + ds_lsh_s
    for _ in range(2):  # best of 3, like the driver
        _, _, m_s, l_s = datasketch_run(shingles, args)
        ds_s = min(ds_s, m_s + l_s)
    row("datasketch MinHash + LSH insert/query (shingles given)", ds_s)
    row("datasketch with this script's Python shingling", ds_s + py_shingle_s)
    if args.datatrove_docs > 0:
        try:
            from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
            sig = MinhashDedupSignature(os.path.join(tmp, "datatrove"),
                                        config=MinhashConfig(n_grams=args.ngram, num_buckets=args.bands,
                                                             hashes_per_bucket=args.rows))
            subset = docs[:args.datatrove_docs]
            sig.get_shingles(subset[0])  # loads spaCy
            t0 = time.perf_counter()
            for d in subset:
                sh = sig.get_shingles(d)
                if sh.size:
                    sig.get_signature(sh)
            secs = time.perf_counter() - t0
            row(f"datatrove MinhashDedupSignature, stage 1 only ({len(subset)} docs)", secs, len(subset),
                sum(len(d.encode()) for d in subset))
        except ImportError as e:
            print(f"| datatrove: not importable ({e}) | | | |")
    print(f"\n(best of 3 runs each; claw: the driver's add() + finish(), JSON parsing excluded; "
          f"{os.cpu_count()} CPUs, shared machine)")


if __name__ == "__main__":
    main()
