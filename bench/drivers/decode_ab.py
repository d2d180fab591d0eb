"""Single-stream decode, claw then llama.cpp back to back on the same GGUF
file, a few rounds: on a shared machine whose memory bandwidth moves from
one minute to the next, the pairs compare better than one long run
(bench/drivers/bench_serve.py measures each engine once per type, minutes apart).

    PY=$(tools/hf_env.sh /tmp/claw-hf-venv)
    $PY bench/drivers/decode_ab.py --claw build/bin/claw --model /tmp/claw-bench-serve/llama-1b --types q4_0,q8_0

The model directory is one bench/drivers/bench_serve.py made (its TYPE.gguf files);
decode is bench_serve's: 64 tokens after a 16-token prompt, the best of 3.
"""
import argparse
import json
import os
import random
import subprocess

import bench_serve as bs

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", default="build/bin/claw")
    ap.add_argument("--model", default="/tmp/claw-bench-serve/llama-1b")
    ap.add_argument("--types", default="q4_0,q8_0")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--llamacpp-python", default="/tmp/claw-llamacpp-venv/bin/python")
    a = ap.parse_args()
    vocab = json.load(open(os.path.join(a.model, "hf", "config.json")))["vocab_size"]
    for t in a.types.split(","):
        g = os.path.join(a.model, f"{t}.gguf")
        for _ in range(a.rounds):
            s = bs.ClawServer(os.path.abspath(a.claw), g, a.threads, os.path.join(a.model, "serve.log"))
            rng = random.Random(1)
            ids = lambda n: [rng.randrange(256, vocab - 1) for _ in range(n)]  # noqa: E731
            try:
                decode = bs.claw_decode_tok_s(s, ids)
            finally:
                s.stop()
            out = subprocess.run([a.llamacpp_python, os.path.join(HERE, "llamacpp_runner.py"), g, str(a.threads)],
                                 check=True, capture_output=True, text=True).stdout
            lc = json.loads(out.strip().splitlines()[-1])["decode_tok_s"]
            print(f"{os.path.basename(a.model)} {t}: claw {decode:.1f} tok/s, llama.cpp {lc:.1f} tok/s "
                  f"({decode / lc:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
