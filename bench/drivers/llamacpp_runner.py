"""llama.cpp's side of bench/drivers/bench_serve.py, run in a venv with the PyPI
`llama-cpp-python` build (its bundled llama.cpp, compiled for this CPU):

    llamacpp_runner.py MODEL.gguf THREADS   prints one JSON object

Measures on the GGUF file claw exported (token ids in, no text):
  decode_tok_s    single-stream decode after a 16-token prompt (64 tokens)
  prefill_tok_s   a 512-token prompt's evaluation
  ttft_ms         time to the first token of that 512-token prompt
  request_s       one request of a 32-token prompt and 32 generated tokens
                  (llama-cpp-python runs one request at a time: N concurrent
                  streams queue behind each other; bench_serve.py derives
                  their latencies and throughput from this)
  peak_rss_mib    of this process
"""
import json
import random
import resource
import sys
import time

from llama_cpp import Llama

path, threads = sys.argv[1], int(sys.argv[2])
llm = Llama(model_path=path, n_ctx=2048, n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False,
            logits_all=False)
V = llm.n_vocab()
rng = random.Random(0)


def ids(n):
    return [rng.randrange(256, V - 1) for _ in range(n)]


def run(prompt, n):
    """Greedy generation of n tokens; returns (time to first token, total time)."""
    llm.reset()
    t0 = time.perf_counter()
    first = None
    got = 0
    for _ in llm.generate(prompt, top_k=1, top_p=1.0, temp=0.0, reset=True):
        got += 1
        if first is None:
            first = time.perf_counter() - t0
        if got == n:
            break
    return first, time.perf_counter() - t0


run(ids(16), 4)  # warm up
decode = []
for _ in range(3):
    first, total = run(ids(16), 64)
    decode.append(63 / (total - first))
ttft, pp = [], []
for _ in range(2):
    first, _ = run(ids(512), 1)
    ttft.append(first)
    pp.append(512 / first)
req = min(run(ids(32), 32)[1] for _ in range(2))
print(json.dumps({"decode_tok_s": max(decode), "prefill_tok_s": max(pp), "ttft_ms": 1e3 * min(ttft), "request_s": req,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
