"""`claw curate` against datatrove on the same documents and thread count.

  python bench/drivers/bench_curate.py --claw build/bin/claw [--big-mb 1024]   (python: tests/e2e/curate/curate_env.sh)

Input: the built-in State of the Union corpus cut into documents of 3-12
sentences, every 10th turned into boilerplate (a bulleted list, a repeated
line) so the filters have work; the first --docs of them (datatrove
filters about 100 documents/s) in 2 JSONL files. The roof:
one core's memory copy bandwidth (numpy), in the same run.

1. Per stage, one thread: claw's time inside the stage (its stats: the
   stage's seconds over its documents) against datatrove's time inside the
   same step (filter() / format() called on Document objects in a loop, the
   reading excluded on both sides): documents/s and MB/s, and the ratio.
2. The whole streaming pipeline (language, the four heuristic filters, PII,
   reading and writing): claw curate at 1 and 2 threads against datatrove's
   LocalPipelineExecutor with 2 tasks on 1 and 2 workers, wall time.
   And claw alone at 1 and 2 threads on the whole corpus (16k documents).
3. MinHash deduplication (5-grams, 14 x 8): claw's minhash_dedup stage
   against datatrove's four steps (signature, buckets, cluster, filter).
4. Memory: claw curate over a --big-mb input (the corpus repeated, each
   copy with a number so the copies differ) through MinHash dedup (first,
   so it sees every document) and the whole pipeline; the peak RSS
   (/usr/bin/time).
Prints markdown tables.
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

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("CLAW_DATA_DIR", os.path.join(HERE, "..", "..", "data"))

STREAM = ["language", "gopher_repetition", "gopher_quality", "c4_quality", "fineweb_quality", "pii"]


def corpus():
    rng = random.Random(1)
    docs = []
    for path in sorted(glob.glob(os.path.join(DATA, "sotu", "*.txt"))):
        s = open(path, encoding="utf-8").read().replace("\n", " ").split(". ")
        i = 0
        while i < len(s) - 2:
            n = rng.randint(3, 12)
            docs.append(". ".join(s[i:i + n]).strip() + ".")
            i += n
    for i in range(0, len(docs), 10):
        words = docs[i].split()
        if (i // 10) % 2:
            docs[i] = "\n".join("- " + " ".join(words[j:j + 3]) for j in range(0, len(words), 3))
        else:
            docs[i] = "\n".join([words[0] + " " + words[-1]] * 8 + [docs[i]])
    rng.shuffle(docs)
    return docs


def write_input(docs, d, copies=1):
    os.makedirs(d, exist_ok=True)
    half = (len(docs) + 1) // 2
    for k in range(2):
        with open(os.path.join(d, f"part{k}.jsonl"), "w") as f:
            for c in range(copies):
                for j, t in enumerate(docs[k * half:(k + 1) * half]):
                    text = t if c == 0 else f"{t} ({c})"
                    f.write(json.dumps({"id": f"{k}-{c}-{j}", "text": text}) + "\n")


def stage_toml(kind):
    if kind == "language":
        return '[[stage]]\nkind = "language"\nlanguages = ["en"]\n'
    return f'[[stage]]\nkind = "{kind}"\n'


def run_claw(claw, inp, out, kinds, threads, timed=False):
    shutil.rmtree(out, ignore_errors=True)
    cfg = out + ".toml"
    with open(cfg, "w") as f:
        f.write(f'[input]\npaths = ["{inp}"]\n[output]\ndir = "{out}"\n' + "".join(stage_toml(k) for k in kinds))
    cmd = [claw, "curate", "--config", cfg, "--threads", str(threads)]
    if timed:
        cmd = ["/usr/bin/time", "-f", "maxrss_kb %M"] + cmd
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    # Per stage, summed over the shards' stats files (the printed table rounds the seconds).
    stats = {}
    for f in sorted(os.listdir(os.path.join(out, "stats"))):
        j = json.load(open(os.path.join(out, "stats", f)))
        for kind, st in zip(kinds, j["stages"]):
            if st["docs_in"] == 0:
                continue
            acc = stats.setdefault(kind, {"docs": 0, "out": 0, "mb": 0.0, "s": 0.0})
            acc["docs"] += st["docs_in"]
            acc["out"] += st["docs_out"]
            acc["mb"] += st["bytes_in"] / 1e6
            acc["s"] += st["seconds"]
    for line in p.stdout.splitlines():  # a deduplicator's figures are in its own file: take the table's
        m = re.match(r"^(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", line)
        if m and m.group(2) not in stats:
            stats[m.group(2)] = {"docs": int(m.group(3)), "out": int(m.group(4)), "mb": float(m.group(5)),
                                 "s": float(m.group(7))}
    rss = re.search(r"maxrss_kb (\d+)", p.stderr)
    return wall, stats, (int(rss.group(1)) / 1024 if rss else None), p.stdout


def datatrove_step(kind):
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                            GopherRepetitionFilter, LanguageFilter)
    from datatrove.pipeline.formatters import PIIFormatter
    if kind == "language":
        # The same lid.176 file as claw's, instead of datatrove's download
        # (no network here); workers fork, so they inherit the patch.
        import datatrove.utils.lid as lid
        lid.cached_asset_path_or_download = lambda *a, **k: os.path.join(DATA, "lid", "lid.176.ftz")
        return LanguageFilter(languages=["en"])
    return {"gopher_repetition": GopherRepetitionFilter, "gopher_quality": GopherQualityFilter,
            "c4_quality": C4QualityFilter, "fineweb_quality": FineWebQualityFilter, "pii": PIIFormatter}[kind]()


def time_datatrove(kind, docs):
    from datatrove.data import Document
    step = datatrove_step(kind)
    ds = [Document(text=t, id=str(i)) for i, t in enumerate(docs)]
    call = (lambda d: step.format(d.text)) if kind == "pii" else step.filter
    call(ds[0])  # loads models and tokenizers outside the timing
    t0 = time.perf_counter()
    for d in ds:
        call(d)
    return time.perf_counter() - t0


def datatrove_pipeline(inp, out, workers):
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    steps = [JsonlReader(inp, compression=None)] + [datatrove_step(k) for k in STREAM] + [
        JsonlWriter(out, compression=None)]
    ex = LocalPipelineExecutor(steps, tasks=2, workers=workers, logging_dir=out + "_logs", skip_completed=False,
                               start_method="fork")
    t0 = time.perf_counter()
    ex.run()
    return time.perf_counter() - t0


def datatrove_minhash(inp, out):
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter,
                                          MinhashDedupSignature)
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    cfg = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8)
    t0 = time.perf_counter()
    for steps, tasks in [([JsonlReader(inp, compression=None), MinhashDedupSignature(out + "/sigs", config=cfg)], 2),
                         ([MinhashDedupBuckets(out + "/sigs", out + "/buckets", config=cfg)], cfg.num_buckets),
                         ([MinhashDedupCluster(out + "/buckets", out + "/remove_ids", config=cfg)], 1),
                         ([JsonlReader(inp, compression=None), MinhashDedupFilter(out + "/remove_ids"),
                           JsonlWriter(out + "/deduped", compression=None)], 2)]:
        LocalPipelineExecutor(steps, tasks=tasks, workers=1, logging_dir=out + "/logs", skip_completed=False,
                              start_method="fork").run()
    return time.perf_counter() - t0


def copy_roof():
    a = np.ones(64 << 20, dtype=np.uint8)
    b = np.empty_like(a)
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return a.nbytes / best / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", required=True)
    ap.add_argument("--docs", type=int, default=4000, help="documents for the comparisons (datatrove runs ~100/s)")
    ap.add_argument("--big-mb", type=int, default=1024)
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: stages,pipeline,scaling,minhash,memory")
    ap.add_argument("--stages", default=",".join(STREAM), help="comma-separated stages for part 1 (default: all)")
    a = ap.parse_args()
    skip = set(a.skip.split(","))
    import logging
    from loguru import logger
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    logging.disable(logging.INFO)

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    everything = corpus()
    docs = everything[:a.docs]
    mb = sum(len(t.encode()) for t in docs) / 1e6
    print(f"CPU: {cpu}; {os.cpu_count()} cores; memory copy roof {copy_roof():.0f} MB/s on one core")
    print(f"input: {len(docs)} documents, {mb:.1f} MB of text in 2 files\n")
    work = tempfile.mkdtemp(prefix="bench_curate_")
    inp = os.path.join(work, "in")
    write_input(docs, inp)
    results = {}
    try:
        if "stages" not in skip:
            print("| stage | claw docs/s (1 thread) | claw MB/s | datatrove docs/s | datatrove MB/s | claw / datatrove |")
            print("|---|---:|---:|---:|---:|---:|")
            for kind in a.stages.split(","):
                _, st, _, _ = run_claw(a.claw, inp, os.path.join(work, "o_" + kind), [kind], 1)
                s = st[kind]
                dt = time_datatrove(kind, docs)
                c_dps, d_dps = s["docs"] / s["s"], len(docs) / dt
                results[kind] = {"claw_docs_s": c_dps, "datatrove_docs_s": d_dps}
                print(f"| {kind} | {c_dps:,.0f} | {s['mb'] / s['s']:.1f} | {d_dps:,.0f} | {mb / dt:.2f} | "
                      f"{c_dps / d_dps:.0f}x |", flush=True)
            print()
        if "pipeline" not in skip:
            print("| whole streaming pipeline, wall | 1 thread | 2 threads | scaling |")
            print("|---|---:|---:|---:|")
            c1 = run_claw(a.claw, inp, os.path.join(work, "p1"), STREAM, 1)[0]
            c2 = run_claw(a.claw, inp, os.path.join(work, "p2"), STREAM, 2)[0]
            d1 = datatrove_pipeline(inp, os.path.join(work, "dt1"), 1)
            d2 = datatrove_pipeline(inp, os.path.join(work, "dt2"), 2)
            results["pipeline"] = {"claw": [c1, c2], "datatrove": [d1, d2]}
            print(f"| claw curate | {c1:.2f} s ({len(docs) / c1:,.0f} docs/s) | {c2:.2f} s "
                  f"({len(docs) / c2:,.0f} docs/s) | {c1 / c2:.2f}x |")
            print(f"| datatrove (2 tasks) | {d1:.2f} s ({len(docs) / d1:,.0f} docs/s) | {d2:.2f} s "
                  f"({len(docs) / d2:,.0f} docs/s) | {d1 / d2:.2f}x |")
            print(f"| claw / datatrove | {d1 / c1:.0f}x | {d2 / c2:.0f}x | |\n", flush=True)
        if "scaling" not in skip:  # claw alone on the whole corpus: long enough to see the threads
            whole = os.path.join(work, "whole")
            write_input(everything, whole)
            wmb = sum(len(t.encode()) for t in everything) / 1e6
            w1 = run_claw(a.claw, whole, os.path.join(work, "w1"), STREAM + ["minhash_dedup"], 1)[0]
            w2 = run_claw(a.claw, whole, os.path.join(work, "w2"), STREAM + ["minhash_dedup"], 2)[0]
            results["scaling"] = {"docs": len(everything), "mb": wmb, "wall": [w1, w2]}
            print(f"claw curate, whole corpus ({len(everything)} documents, {wmb:.1f} MB), streaming stages + MinHash: "
                  f"1 thread {w1:.2f} s ({wmb / w1:.1f} MB/s), 2 threads {w2:.2f} s ({wmb / w2:.1f} MB/s): "
                  f"{w1 / w2:.2f}x\n", flush=True)
        if "minhash" not in skip:
            c_wall, st, _, _ = run_claw(a.claw, inp, os.path.join(work, "mh"), ["minhash_dedup"], 1)
            d_wall = datatrove_minhash(inp, os.path.join(work, "dtmh"))
            removed_dt = 0
            results["minhash"] = {"claw": c_wall, "datatrove": d_wall}
            print("| MinHash dedup (5-grams, 14 x 8), 1 thread, wall | seconds | docs/s | removed |")
            print("|---|---:|---:|---:|")
            print(f"| claw curate (read, dedup, write) | {c_wall:.2f} | {len(docs) / c_wall:,.0f} | "
                  f"{st['minhash_dedup']['docs'] - st['minhash_dedup']['out']} |")
            print(f"| datatrove (4 steps) | {d_wall:.2f} | {len(docs) / d_wall:,.0f} | |")
            print(f"| claw / datatrove | {d_wall / c_wall:.0f}x | | |\n", flush=True)
        if "memory" not in skip:
            whole_mb = sum(len(t.encode()) for t in everything) / 1e6
            copies = max(1, int(a.big_mb / whole_mb + 0.5))
            big = os.path.join(work, "big")
            write_input(everything, big, copies)
            size = sum(os.path.getsize(os.path.join(big, f)) for f in os.listdir(big)) / 1e6
            # Deduplication first, so that it sees every document (the copies
            # are near duplicates of one another: it keeps one of each).
            wall, st, rss, table = run_claw(a.claw, big, os.path.join(work, "bigout"), ["minhash_dedup"] + STREAM, 2,
                                            timed=True)
            print(table)
            shutil.rmtree(big)
            results["memory"] = {"input_mb": size, "rss_mb": rss, "wall": wall}
            print(f"memory: {size:.0f} MB of JSONL ({copies} copies) through MinHash dedup and the pipeline on 2 "
                  f"threads: peak RSS {rss:.0f} MB, {wall:.0f} s ({size / wall:.1f} MB/s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    json.dump(results, open(os.path.join(tempfile.gettempdir(), "bench_curate.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
