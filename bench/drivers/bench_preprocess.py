"""Throughput of `claw preprocess` on >= 100 MB of real text, with 1 and 2
workers (GPT-2 BPE, --append-eod).

The corpus is the documentation already on a Debian machine: every file
under /usr/share/doc, /usr/share/man and /usr/share/info that is UTF-8 text
(gzip-compressed ones decompressed; binaries skipped), one JSONL document
per file, in sorted path order, plus the built-in State of the Union
speeches, cut at --mb megabytes. A machine with too little documentation
needs a few *-doc packages first, e.g.
    apt-get install python3-doc gcc-doc cmake-doc
(python3-doc alone adds ~60 MB of HTML).

The outputs of the runs are compared byte for byte before any figure is
printed. Each figure is one machine-readable line:
    bench_preprocess variant=full workers=W input_mb=... documents=... tokens=...
        seconds=... mb_per_s=... docs_per_s=... tokens_per_s=... peak_rss_mb=...
(MB/s of JSONL text) for 1 and 2 workers, then variant=half (half the
corpus: peak RSS does not grow with the input) and, when the `zstd` program
is installed, variant=zstd (the corpus compressed).

    /usr/bin/python3 bench/drivers/bench_preprocess.py [--claw build/bin/claw] [--mb 150]
"""

import argparse
import filecmp
import gzip
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUMMARY = re.compile(r"preprocess: (\d+) lines -> (\d+) documents .*?, (\d+) tokens, ([\d.]+) MB in ([\d.]+) s")


def documents(data_dir):
    """(name, text) of every UTF-8 text file of the system documentation, then the speeches."""
    for root in ("/usr/share/doc", "/usr/share/man", "/usr/share/info"):
        paths = []
        for dirpath, _, files in os.walk(root):
            paths.extend(os.path.join(dirpath, f) for f in files)
        for path in sorted(paths):
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                with open(path, "rb") as f:
                    raw = f.read()
                if path.endswith(".gz"):
                    raw = gzip.decompress(raw)
                if b"\0" in raw:
                    continue
                yield path, raw.decode("utf-8")
            except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile):
                continue
    sotu = os.path.join(data_dir, "sotu")
    for name in sorted(os.listdir(sotu)):
        with open(os.path.join(sotu, name), encoding="utf-8") as f:
            yield name, f.read()


def build_corpus(path, data_dir, limit_bytes):
    written = 0
    with open(path + ".tmp", "w", encoding="utf-8") as out:
        for name, text in documents(data_dir):
            line = json.dumps({"text": text, "source": name}, ensure_ascii=False) + "\n"
            out.write(line)
            written += len(line.encode("utf-8"))
            if written >= limit_bytes:
                break
    if written < limit_bytes:
        os.remove(path + ".tmp")
        sys.exit(f"bench_preprocess: only {written / 1e6:.0f} MB of documentation text on this machine, "
                 f"{limit_bytes / 1e6:.0f} MB wanted; install some *-doc packages (see the header) or lower --mb")
    os.replace(path + ".tmp", path)


def run(claw, gpt2, corpus, prefix, workers):
    """Runs claw preprocess; returns the parsed summary and the child's peak RSS."""
    cmd = [claw, "preprocess", "--input", corpus, "--output-prefix", prefix, "--append-eod", "--workers",
           str(workers), "--vocab-file", os.path.join(gpt2, "encoder.json"), "--merge-file",
           os.path.join(gpt2, "vocab.bpe")]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench_preprocess: {' '.join(cmd)} failed")
    m = SUMMARY.search(stdout)
    if not m:
        sys.exit(f"bench_preprocess: no summary in: {stdout}")
    lines, docs, tokens, mb, seconds = m.groups()
    return {"documents": int(docs), "tokens": int(tokens), "input_mb": float(mb), "seconds": float(seconds),
            "wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024}


def report(variant, workers, r):
    s = r["seconds"]
    print(f"bench_preprocess variant={variant} workers={workers} input_mb={r['input_mb']:.1f} documents={r['documents']} "
          f"tokens={r['tokens']} seconds={s:.2f} mb_per_s={r['input_mb'] / s:.1f} docs_per_s={r['documents'] / s:.0f} "
          f"tokens_per_s={r['tokens'] / s:.0f} peak_rss_mb={r['peak_rss_mb']:.0f}", flush=True)


def same_files(a, b):
    # filecmp streams: reading whole outputs here would raise this process's
    # RSS, which the next child's peak RSS would then include.
    return all(filecmp.cmp(a + ext, b + ext, shallow=False) for ext in (".bin", ".idx"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claw", default=os.path.join(ROOT, "build", "bin", "claw"))
    ap.add_argument("--mb", type=float, default=150, help="corpus size in MB (at least 100 for the issue's figure)")
    ap.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "claw_bench_preprocess"),
                    help="where the corpus is built (kept for later runs) and outputs go")
    ap.add_argument("--build-corpus", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    data_dir = os.environ.get("CLAW_DATA_DIR") or os.path.join(ROOT, "data")
    gpt2 = os.path.join(data_dir, "gpt2")
    os.makedirs(args.work_dir, exist_ok=True)
    corpus = os.path.join(args.work_dir, f"docs_{int(args.mb)}mb.jsonl")
    half = os.path.join(args.work_dir, f"docs_{int(args.mb)}mb_half.jsonl")
    if args.build_corpus:
        build_corpus(corpus, data_dir, int(args.mb * 1e6))
        with open(corpus, "rb") as src:
            n = sum(1 for _ in src)
        with open(corpus, "rb") as src, open(half + ".tmp", "wb") as dst:
            for i, line in enumerate(src):
                if i == n // 2:
                    break
                dst.write(line)
        os.replace(half + ".tmp", half)
        return
    if not (os.path.exists(corpus) and os.path.exists(half)):
        # In a child: a child's peak RSS counts the memory of the process
        # that forked it, so this harness must stay small.
        subprocess.run([sys.executable, __file__, "--build-corpus", "--mb", str(args.mb), "--work-dir",
                        args.work_dir], check=True)
    print(f"bench_preprocess harness_peak_rss_mb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}"
          " (the floor of every peak_rss_mb below)")

    out = os.path.join(args.work_dir, "out")
    results = {w: run(args.claw, gpt2, corpus, f"{out}_w{w}", w) for w in (1, 2)}
    if not same_files(f"{out}_w1_text_document", f"{out}_w2_text_document"):
        sys.exit("bench_preprocess: 1 and 2 workers wrote different datasets")
    for w, r in results.items():
        report("full", w, r)
    print(f"bench_preprocess speedup_2_over_1={results[1]['seconds'] / results[2]['seconds']:.2f}")
    report("half", 2, run(args.claw, gpt2, half, f"{out}_half", 2))
    if shutil.which("zstd"):
        zst = corpus + ".zst"
        if not os.path.exists(zst):
            subprocess.run(["zstd", "-q", "-T0", "-f", corpus, "-o", zst], check=True)
        r = run(args.claw, gpt2, zst, f"{out}_zst", 2)
        if not same_files(f"{out}_zst_text_document", f"{out}_w2_text_document"):
            sys.exit("bench_preprocess: the .zst input gave a different dataset")
        print(f"bench_preprocess zstd_compressed_mb={os.path.getsize(zst) / 1e6:.1f}")
        report("zstd", 2, r)
    for name in os.listdir(args.work_dir):
        if name.startswith("out_"):
            os.remove(os.path.join(args.work_dir, name))


if __name__ == "__main__":
    main()
