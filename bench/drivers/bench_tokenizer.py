#!/usr/bin/python3
"""Tokenizer throughput of claw against OpenAI's tiktoken, same text, same run.

For each encoding (gpt2 = claw's GPT2BPETokenizer from encoder.json +
vocab.bpe; cl100k_base, o200k_base = claw's TikTokenizer from the rank file):
  * tiktoken: npm tiktoken@1.0.22 (Rust core compiled to WASM, one thread),
    bench/drivers/bench_tokenizer.cjs, best of --repeats runs in one node process;
  * claw: `claw tokenize --stats` in a fresh process per run (so every run
    starts with cold piece caches), best of --repeats, encoding time only
    (reading and printing excluded, like the tiktoken side).
Two modes: `lines` (each line is a text; claw encodes them with
encode_batch on 1..N threads) and `whole` (the file is one text, one
thread). Token counts of claw and tiktoken must agree before any figure is
printed (the oracle tests compare the ids themselves).

Prints one machine-readable line per figure:
  bench_tokenizer encoding=gpt2 mode=lines impl=claw threads=2 mb_per_s=... ratio_vs_tiktoken=...
cpu_mb_per_s = bytes per CPU-second of the claw process while encoding: on a
busy machine, equal values for 1 and 2 threads mean the code scales and the
cores were taken by others.

  /usr/bin/python3 bench/drivers/bench_tokenizer.py --claw build/bin/claw
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def claw_args(encoding, data_dir):
    if encoding == "gpt2":
        return ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", f"{data_dir}/gpt2/encoder.json",
                "--merge-file", f"{data_dir}/gpt2/vocab.bpe"]
    return ["--tokenizer-type", "TikTokenizer", "--tokenizer-model", f"{data_dir}/tiktoken/{encoding}.tiktoken"]


def run_tokenize(claw, tokenizer_args, path, threads, whole):
    """`claw tokenize --stats` on `path`: its stats line as a dict."""
    cmd = [claw, "tokenize", *tokenizer_args, "--stats", "--num-threads", str(threads), "--input", path]
    if whole:
        cmd.append("--whole-input")
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {r.stderr.strip()[-500:]}")
    line = [l for l in r.stderr.splitlines() if l.startswith("tokenize:")][-1]
    return {k: v for k, v in re.findall(r"(\w+)=(\S+)", line)}


def run_claw(claw, encoding, data_dir, path, threads, whole):
    return run_tokenize(claw, claw_args(encoding, data_dir), path, threads, whole)


def speeches_file(data_dir, tmp):
    """The State of the Union speeches as one file (10.8 MB) under tmp."""
    speeches = sorted(glob.glob(os.path.join(data_dir, "sotu", "*.txt")))
    if not speeches:
        sys.exit("no speeches in <data dir>/sotu; run scripts/fetch-data")
    path = os.path.join(tmp, "sotu.txt")
    with open(path, "w", encoding="utf-8") as out:
        for s in speeches:
            with open(s, encoding="utf-8") as f:
                out.write(f.read().rstrip("\n") + "\n")
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--claw", default=os.path.join(REPO, "build/bin/claw"))
    p.add_argument("--data-dir", default=os.environ.get("CLAW_DATA_DIR") or os.path.join(REPO, "data"))
    p.add_argument("--input", help="text file (default: the State of the Union speeches, 10.8 MB)")
    p.add_argument("--encodings", default="gpt2,cl100k_base,o200k_base")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()

    modules = os.path.join(a.data_dir, "npm", "node_modules")
    if not os.path.exists(os.path.join(modules, "tiktoken", "package.json")):
        sys.exit(f"bench_tokenizer: tiktoken is not installed in {modules}; run scripts/setup")
    with tempfile.TemporaryDirectory() as tmp:
        path = a.input or speeches_file(a.data_dir, tmp)
        print(f"# input {path}: {os.path.getsize(path)} bytes; machine load {os.getloadavg()[0]:.2f} "
              f"on {os.cpu_count()} CPUs", flush=True)

        threads = [int(t) for t in a.threads.split(",")]
        for enc in a.encodings.split(","):
            node = subprocess.run(["node", os.path.join(HERE, "bench_tokenizer.cjs"), modules, enc, path,
                                   str(a.repeats)], capture_output=True, text=True, check=True)
            peer = {r["mode"]: r for r in map(json.loads, node.stdout.split("\n")[:-1])}
            for mode in ("lines", "whole"):
                t = peer[mode]
                print(f"bench_tokenizer encoding={enc} mode={mode} impl=tiktoken-wasm threads=1 "
                      f"mb_per_s={t['mb_per_s']:.2f} tokens={t['tokens']}", flush=True)
                one = None
                for n in (threads if mode == "lines" else [1]):
                    runs = [run_claw(a.claw, enc, a.data_dir, path, n, mode == "whole") for _ in range(a.repeats)]
                    if int(runs[0]["tokens"]) != t["tokens"] or int(runs[0]["bytes"]) != t["bytes"]:
                        sys.exit(f"bench_tokenizer: {enc} {mode}: claw encoded {runs[0]['bytes']} bytes into "
                                 f"{runs[0]['tokens']} tokens, tiktoken {t['bytes']} into {t['tokens']}")
                    best = max(runs, key=lambda r: float(r["encode_mb_per_s"]))
                    mbs = float(best["encode_mb_per_s"])
                    cpu = int(best["bytes"]) / float(best["encode_cpu_s"]) / 1e6
                    one = one or mbs
                    print(f"bench_tokenizer encoding={enc} mode={mode} impl=claw threads={n} mb_per_s={mbs:.2f} "
                          f"cpu_mb_per_s={cpu:.2f} ratio_vs_tiktoken={mbs / t['mb_per_s']:.2f} "
                          f"speedup_vs_1_thread={mbs / one:.2f}", flush=True)


if __name__ == "__main__":
    main()
