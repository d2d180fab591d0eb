"""tokenizer.json encoding throughput of claw against Hugging Face's
tokenizers library (PyPI, Rust), same files, same text, same run.

Files: the tokenizer.json of each family as tests/e2e/tokenizer/
hf_json_from_gguf.py builds it from llama.cpp's vocabularies (llama3: Llama
3, byte-level with its Split regex; qwen2: Qwen 2, NFC + Split; llama2: Llama
2's SentencePiece-style BPE, character mode with byte fallback; gemma:
Gemma's, 262k tokens).
  * tokenizers: one Python process per thread count (RAYON_NUM_THREADS), the
    file loaded once, encode_batch_fast (its fastest call: no offsets) of the
    lines or of the whole text, add_special_tokens=False; best of --repeats
    in that process (its caches warm after the first);
  * claw: `claw tokenize --tokenizer-type HFTokenizer --stats` in a fresh
    process per run (cold piece caches), encoding time only, best of --repeats.
Modes: `lines` (each line a text, 1..N threads) and `whole` (the file as one
text, one thread). Token counts of both must agree before a figure prints
(tokenizer_hf_vs_tokenizers compares the ids themselves).

    tools/hf_env.sh >/dev/null   # the venv with tokenizers
    /tmp/claw-hf-venv/bin/python bench/drivers/bench_hf_tokenizer.py --claw build/bin/claw [--input FILE]

Prints one line per figure:
  bench_hf_tokenizer family=llama3 mode=lines impl=claw threads=2 mb_per_s=... ratio_vs_tokenizers=...
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e", "tokenizer"))
import hf_json_from_gguf  # noqa: E402
from bench_tokenizer import run_tokenize, speeches_file  # noqa: E402

PEER = r"""
import json, sys, time
from tokenizers import Tokenizer
path, text_path, mode, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = Tokenizer.from_file(path)
tok.encode_special_tokens = True  # special-token text as text, as `claw tokenize` encodes it by default
data = open(text_path, encoding="utf-8", newline="").read()  # \r\n stays as it is
lines = data.split("\n")  # as claw tokenize: each line without its newline
if lines and lines[-1] == "":
    lines.pop()
best, tokens = None, 0
for _ in range(repeats):
    t0 = time.perf_counter()
    # encode_batch_fast: the library's fastest call (no offsets).
    texts = lines if mode == "lines" else [data]
    tokens = sum(len(e.ids) for e in tok.encode_batch_fast(texts, add_special_tokens=False))
    dt = time.perf_counter() - t0
    best = dt if best is None else min(best, dt)
encoded = len(data.encode("utf-8")) - (len(lines) - (0 if data.endswith("\n") else 1) if mode == "lines" else 0)
print(json.dumps({"tokens": tokens, "bytes": encoded, "seconds": best}))
"""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--claw", default=os.path.join(REPO, "build/bin/claw"))
    p.add_argument("--data-dir", default=os.environ.get("CLAW_DATA_DIR") or os.path.join(REPO, "data"))
    p.add_argument("--input", help="text file (default: the State of the Union speeches, 10.8 MB)")
    p.add_argument("--families", default="llama3,qwen2,llama2,gemma")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    llama_cpp = subprocess.run([os.path.join(REPO, "tools", "llamacpp_sdist.sh")], capture_output=True, text=True,
                               check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        path = a.input or speeches_file(a.data_dir, tmp)
        print(f"# input {path}: {os.path.getsize(path)} bytes; machine load {os.getloadavg()[0]:.2f} "
              f"on {os.cpu_count()} CPUs", flush=True)
        threads = [int(t) for t in a.threads.split(",")]
        for family in a.families.split(","):
            tokenizer_json, _ = hf_json_from_gguf.build(family, os.path.join(llama_cpp, "models"))
            for mode in ("lines", "whole"):
                one = None
                for n in (threads if mode == "lines" else [1]):
                    env = dict(os.environ, RAYON_NUM_THREADS=str(n), TOKENIZERS_PARALLELISM="true")
                    r = subprocess.run([sys.executable, "-c", PEER, tokenizer_json, path, mode, str(a.repeats)],
                                       capture_output=True, text=True, env=env, check=True)
                    peer = json.loads(r.stdout)
                    peer_mbs = peer["bytes"] / peer["seconds"] / 1e6
                    print(f"bench_hf_tokenizer family={family} mode={mode} impl=tokenizers threads={n} "
                          f"mb_per_s={peer_mbs:.2f} tokens={peer['tokens']}", flush=True)
                    args = ["--tokenizer-type", "HFTokenizer", "--tokenizer-model", tokenizer_json]
                    runs = [run_tokenize(a.claw, args, path, n, mode == "whole") for _ in range(a.repeats)]
                    if int(runs[0]["tokens"]) != peer["tokens"]:
                        sys.exit(f"bench_hf_tokenizer: {family} {mode}: claw {runs[0]['tokens']} tokens, "
                                 f"tokenizers {peer['tokens']}")
                    best = max(runs, key=lambda r: float(r["encode_mb_per_s"]))
                    mbs = float(best["encode_mb_per_s"])
                    one = one or mbs
                    print(f"bench_hf_tokenizer family={family} mode={mode} impl=claw threads={n} mb_per_s={mbs:.2f} "
                          f"ratio_vs_tokenizers={mbs / peer_mbs:.2f} speedup_vs_1_thread={mbs / one:.2f}", flush=True)


if __name__ == "__main__":
    main()
