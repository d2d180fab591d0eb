"""Serving speed: `claw serve` against llama.cpp (PyPI llama-cpp-python) and
Hugging Face transformers generate(), on the same weights in the same run.

    PY=$(tools/hf_env.sh /tmp/claw-hf-venv)
    $PY bench/drivers/bench_serve.py --claw build/bin/claw [--models gpt2-124m,llama-1b] [--types f32,q8_0,q4_0]

Models are random (transformers' initialisation) at two shapes: GPT-2 124M
and a ~1B Llama (Llama 3.2 1B's layers, GPT-2's 50257-token vocabulary so
that llama.cpp has a tokenizer). transformers saves each; claw imports it
and exports GGUF files at f32, q8_0 and q4_0; llama.cpp and claw run those
files, transformers its fp32 directory. Measured:
  - the machine's copy bandwidth (build/bin/bench_quant --copy-only, around
    each decode run: it moves from minute to minute on a shared machine), and
    single-stream decode as a fraction of the roofline it sets: bandwidth /
    (bytes of weights a token reads + its KV cache);
  - single-stream decode tokens/s (64 tokens after 16), prompt processing
    tokens/s and time to first token on a 512-token prompt;
  - 1, 4, 16 and 64 concurrent streams (32-token prompts, 32 tokens each):
    aggregate tokens/s and p50/p99 request latency;
  - a repeated 1000-token system prompt: time to first token cold and with
    the prefix cached (claw);
  - peak RSS of each engine's process.
claw is measured over HTTP (its server, the client in this process: both
share the CPU); llama.cpp and transformers in-process (no HTTP), which
favours them. llama-cpp-python runs one request at a time, so N concurrent
streams queue: its aggregate is one stream's, and request k of N waits for
the k - 1 before it (latencies derived from one measured request).
Results: a JSON file and a markdown table (for bench/RESULTS.md).
"""
import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- models

def make_model(name, out):
    import torch
    import transformers as tf
    torch.manual_seed(0)
    if name == "gpt2-124m":
        model = tf.GPT2LMHeadModel(tf.GPT2Config())
    elif name == "llama-1b":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(
            vocab_size=50257, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
            num_key_value_heads=8, max_position_embeddings=2048, tie_word_embeddings=True, rms_norm_eps=1e-5,
            rope_theta=500000.0, bos_token_id=50256, eos_token_id=50256))
    else:
        raise SystemExit(f"unknown model {name}")
    model.save_pretrained(out, safe_serialization=True)


def kv_bytes_per_position(hf_dir):
    c = json.load(open(os.path.join(hf_dir, "config.json")))
    if c["model_type"] == "gpt2":
        return 2 * c["n_layer"] * c["n_embd"] * 4
    heads = c["num_attention_heads"]
    d = c["hidden_size"] // heads
    return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * d * 4


# ---------------------------------------------------------------- claw

class ClawServer:
    def __init__(self, claw, model, threads, log_path, extra=()):
        self.log_path = log_path
        self.proc = subprocess.Popen([claw, "serve", "--model", model, "--port", "0", "--num-threads", str(threads),
                                      "--max-num-seqs", "64", "--kv-cache-memory", "4GiB", *extra],
                                     stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
        self.port = None
        for _ in range(3000):
            text = open(log_path).read()
            m = re.search(r"listening on http://127.0.0.1:(\d+)", text)
            if m and "serving" in text:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"claw serve exited:\n{text}")
            time.sleep(0.1)
        m = re.search(r"([0-9.]+) MiB read a token", open(log_path).read())
        self.weight_bytes = float(m.group(1)) * 2**20

    def peak_rss_mib(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)

    def stream(self, prompt, n):
        """One streamed completion: (time to first token, total time, tokens)."""
        return stream_completion(self.port, prompt, n) + (n,)


def stream_completion(port, prompt, n, name="claw serve"):
    """One streamed /v1/completions request (greedy, ignore_eos, usage in the
    last chunk) to a server on loopback: (time to the first chunk with a
    choice, total time). Asserts the usage counts n tokens."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=1200)
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, (name, r.status, r.read())
    first, tokens, buf = None, None, b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            j = json.loads(event[6:])
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
            if first is None and j.get("choices"):
                first = time.perf_counter() - t0
    total = time.perf_counter() - t0
    c.close()
    assert tokens == n, (name, tokens, n)
    return (first if first is not None else total), total


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def concurrent(fn, n):
    """n calls of fn at once: (wall seconds, durations)."""
    durations = [0.0] * n
    barrier = threading.Barrier(n)

    def one(i):
        barrier.wait()
        t = time.perf_counter()
        fn(i)
        durations[i] = time.perf_counter() - t

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, durations


def claw_decode(s, ids, copy_bandwidth=None):
    """Single-stream decode through the server: 64 tokens after 16, 3 times
    (after a warm-up). Returns the best run's tokens/s and, with
    copy_bandwidth, the machine's copy bandwidth around that run (the mean
    of one copy measured just before and one just after it)."""
    s.stream(ids(16), 4)
    runs = []
    for _ in range(3):
        before = copy_bandwidth() if copy_bandwidth else None
        first, total, n = s.stream(ids(16), 64)
        after = copy_bandwidth() if copy_bandwidth else None
        runs.append(((n - 1) / (total - first), (before + after) / 2 if copy_bandwidth else None))
    return max(runs)


def claw_decode_tok_s(s, ids):
    return claw_decode(s, ids)[0]


def bench_claw(claw, model, threads, workdir, vocab, kv_per_pos, copy_bandwidth, concurrency):
    s = ClawServer(claw, model, threads, os.path.join(workdir, "serve.log"))
    rng = random.Random(1)
    ids = lambda n: [rng.randrange(256, vocab - 1) for _ in range(n)]  # noqa: E731
    try:
        decode, bandwidth = claw_decode(s, ids, copy_bandwidth)
        ttft = [s.stream(ids(512), 1)[0] for _ in range(2)]
        conc = {}
        for n in concurrency:
            wall, d = concurrent(lambda i: s.stream(ids(32), 32), n)
            conc[n] = {"tok_s": n * 32 / wall, "p50_s": percentile(d, 50), "p99_s": percentile(d, 99)}
        prefix = ids(1000)
        cold = s.stream(prefix + ids(8), 1)[0]
        warm = statistics.median(s.stream(prefix + ids(8), 1)[0] for _ in range(3))
        bytes_per_token = s.weight_bytes + kv_per_pos * 48  # mean context of the decode runs
        out = {"decode_tok_s": decode, "prefill_tok_s": 512 / min(ttft), "ttft_ms": 1e3 * min(ttft),
               "concurrency": conc, "prefix_cold_ms": 1e3 * cold, "prefix_warm_ms": 1e3 * warm,
               "weight_mib": s.weight_bytes / 2**20, "bytes_per_token": bytes_per_token,
               "copy_GB_s": bandwidth / 1e9, "roofline_tok_s": bandwidth / bytes_per_token,
               "peak_rss_mib": s.peak_rss_mib()}
        out["pct_roofline"] = 100 * out["decode_tok_s"] / out["roofline_tok_s"]
        return out
    finally:
        s.stop()


# ---------------------------------------------------------------- transformers

def hf_worker(hf_dir, threads, concurrency):
    import resource
    import torch
    import transformers as tf
    import transformers.generation.utils as gen_utils
    gen_utils.is_fsdp_managed_module = lambda m: False  # Debian's torch 1.13 (see tests/e2e/serve/hf_generate.py)
    torch.set_num_threads(threads)
    model = tf.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(2)
    ids = lambda b, n: torch.randint(256, V - 1, (b, n), generator=g)  # noqa: E731

    def gen(prompt, n):
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, pad_token_id=0)
        return time.perf_counter() - t0

    gen(ids(1, 16), 4)
    one = min(gen(ids(1, 16), 1) for _ in range(2))
    decode = max(63 / (gen(ids(1, 16), 64) - one) for _ in range(2))
    ttft = []
    for _ in range(2):
        p = ids(1, 512)
        ttft.append(gen(p, 1))
    conc = {}
    for n in concurrency:
        wall = gen(ids(n, 32), 32)  # one batch: every request ends with the batch
        conc[n] = {"tok_s": n * 32 / wall, "p50_s": wall, "p99_s": wall}
    print(json.dumps({"decode_tok_s": decode, "prefill_tok_s": 512 / min(ttft), "ttft_ms": 1e3 * min(ttft),
                      "concurrency": conc,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


# ---------------------------------------------------------------- main

def run(cmd, **kw):
    log("+", " ".join(cmd))
    return subprocess.run(cmd, check=True, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", default="build/bin/claw")
    ap.add_argument("--models", default="gpt2-124m,llama-1b")
    ap.add_argument("--types", default="f32,q8_0,q4_0")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--workdir", default="/tmp/claw-bench-serve")
    ap.add_argument("--llamacpp-python", default="/tmp/claw-llamacpp-venv/bin/python",
                    help="a Python with llama-cpp-python (pip install llama-cpp-python)")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "results", "serve_results.json"))
    ap.add_argument("--hf-worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    concurrency = [int(x) for x in a.concurrency.split(",")]
    if a.hf_worker:
        return hf_worker(a.hf_worker, a.threads, concurrency)
    claw = os.path.abspath(a.claw)
    quant_bench = os.path.join(os.path.dirname(claw), "bench_quant")

    def copy_bandwidth():
        roof = subprocess.run([quant_bench, "--copy-only", str(a.threads)], check=True, capture_output=True,
                              text=True).stdout
        return float(re.search(r"copy_GB_per_s=([0-9.]+)", roof).group(1)) * 1e9

    bandwidth = copy_bandwidth()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    results = {"machine": {"cpu": cpu, "threads": a.threads, "copy_GB_s": bandwidth / 1e9}, "models": {}}
    log(f"machine: {cpu}, {a.threads} threads, copy bandwidth {bandwidth / 1e9:.1f} GB/s")
    for name in a.models.split(","):
        d = os.path.join(a.workdir, name)
        hf = os.path.join(d, "hf")
        os.makedirs(d, exist_ok=True)
        if not os.path.exists(os.path.join(hf, "config.json")):
            log(f"{name}: making random weights")
            make_model(name, hf)
        if not os.path.exists(os.path.join(d, "ck", "latest_checkpointed_iteration.txt")):
            run([claw, "ckpt", "import", "--input", hf, "--save", os.path.join(d, "ck")], stdout=subprocess.DEVNULL)
        vocab = json.load(open(os.path.join(hf, "config.json")))["vocab_size"]
        kv = kv_bytes_per_position(hf)
        res = results["models"][name] = {}
        for t in a.types.split(","):
            g = os.path.join(d, f"{t}.gguf")
            if not os.path.exists(g):
                run([claw, "ckpt", "export", "--load", os.path.join(d, "ck"), "--format", "gguf", "--type", t,
                     "--output", g], stdout=subprocess.DEVNULL)
            # On a shared machine the bandwidth moves from one minute to the
            # next: each engine's roofline uses copies measured around its
            # own decode runs.
            log(f"{name} {t}: claw serve")
            res.setdefault("claw", {})[t] = bench_claw(claw, g, a.threads, d, vocab, kv, copy_bandwidth, concurrency)
            log(json.dumps(res["claw"][t]))
            log(f"{name} {t}: llama.cpp")
            before = copy_bandwidth()
            out = subprocess.run([a.llamacpp_python, os.path.join(HERE, "llamacpp_runner.py"), g, str(a.threads)],
                                 check=True, capture_output=True, text=True).stdout
            bw = (before + copy_bandwidth()) / 2
            lc = json.loads(out.strip().splitlines()[-1])
            lc["concurrency"] = {n: {"tok_s": 32 / lc["request_s"], "p50_s": lc["request_s"] * (n + 1) / 2,
                                     "p99_s": lc["request_s"] * percentile(range(1, n + 1), 99)} for n in concurrency}
            lc["copy_GB_s"] = bw / 1e9
            lc["pct_roofline"] = 100 * lc["decode_tok_s"] / (bw / res["claw"][t]["bytes_per_token"])
            res.setdefault("llama.cpp", {})[t] = lc
            log(json.dumps(lc))
        log(f"{name} f32: transformers")
        out = subprocess.run([sys.executable, __file__, "--hf-worker", hf, "--threads", str(a.threads),
                              "--concurrency", a.concurrency], check=True, capture_output=True, text=True).stdout
        hfr = json.loads(out.strip().splitlines()[-1])
        hfr["concurrency"] = {int(k): v for k, v in hfr["concurrency"].items()}
        res["transformers"] = {"f32": hfr}
        log(json.dumps(res["transformers"]))
        json.dump(results, open(a.out, "w"), indent=1)
    print(table(results, concurrency))


def table(r, concurrency):
    m = r["machine"]
    lines = [f"Machine: {m['cpu']}, {m['threads']} threads, copy bandwidth {m['copy_GB_s']:.1f} GB/s at the start "
             "(each row's roofline uses the copy measured around its own decode runs: the column 'copy GB/s').", "",
             "| model | weights | engine | decode tok/s | % roofline | copy GB/s | prefill 512 tok/s | TTFT 512 ms | " +
             " | ".join(f"{n} streams tok/s (p50/p99 s)" for n in concurrency) + " | peak RSS MiB |",
             "|---|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(concurrency) + "---:|"]
    for name, res in r["models"].items():
        for engine in ("claw", "llama.cpp", "transformers"):
            for t, x in res.get(engine, {}).items():
                conc = " | ".join(f"{x['concurrency'][n]['tok_s']:.1f} ({x['concurrency'][n]['p50_s']:.2f}/"
                                  f"{x['concurrency'][n]['p99_s']:.2f})" for n in concurrency)
                pct = f"{x['pct_roofline']:.0f}%" if "pct_roofline" in x else "-"
                bw = f"{x['copy_GB_s']:.1f}" if "copy_GB_s" in x else "-"
                lines.append(f"| {name} | {t} | {engine} | {x['decode_tok_s']:.1f} | {pct} | {bw} | {x['prefill_tok_s']:.0f} | "
                             f"{x['ttft_ms']:.0f} | {conc} | {x['peak_rss_mib']:.0f} |")
    lines.append("")
    for name, res in r["models"].items():
        for t, x in res.get("claw", {}).items():
            lines.append(f"- {name} {t}: repeated 1000-token system prompt, time to first token {x['prefix_cold_ms']:.0f} ms "
                         f"cold, {x['prefix_warm_ms']:.0f} ms with the prefix cached "
                         f"({x['prefix_cold_ms'] / x['prefix_warm_ms']:.1f}x)")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
