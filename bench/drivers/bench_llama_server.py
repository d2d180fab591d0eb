"""Serving speed: `claw serve` against llama.cpp's `llama-server`, both
servers that batch continuously, over HTTP with the same client, on the
same GGUF file, the same threads and the KV cache at the same type, in the
same run.

    PY=$(tools/hf_env.sh /tmp/claw-hf-venv)
    $PY bench/drivers/bench_llama_server.py --claw build/bin/claw \
        [--models gpt2-124m,llama-1b] [--types f16,q8_0,q4_k_m,q6_k] [--threads 2]

llama-server (and llama.cpp's libraries) are built from the source the PyPI
sdist of llama-cpp-python carries (tools/llamacpp_build.sh). Models are
bench_serve.py's: random weights (transformers' initialisation) at GPT-2
124M and a ~1B Llama; claw imports them and writes the GGUF file of each
type (`claw ckpt export --format gguf --type T`: llama-quantize's rules and
bytes, tests/e2e/serve/gguf_quants.py), which both servers then load.

Measured, per model, type and server (client: this process, one HTTP
connection per request, streamed /v1/completions on token-id prompts,
greedy, ignore_eos, the token count from the final usage chunk):
  - single-stream decode tokens/s (64 tokens after a 16-token prompt, best
    of 3) and its fraction of the memory roofline: the machine's copy
    bandwidth (bench_quant --copy-only, measured just before and after the
    decode runs) over the bytes a token reads (the weights as claw reports
    them, and the KV cache at the mean context);
  - prompt processing: a 512-token prompt's time to first token (best of 2);
  - N = 1, 4, 16, 64 concurrent streams (32-token prompts, 32 tokens each):
    aggregate tokens/s and p50/p99 request latency. llama-server runs with
    --parallel N slots (restarted for each N, each slot with the context a
    request needs); claw serves every N from one server (--max-num-seqs 64).
Results: a JSON file and a markdown table (bench/results/serving.md).
"""
import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_serve import concurrent, make_model, percentile, stream_completion  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on loopback, ready when /health answers 200."""

    def __init__(self, name, cmd, port, log_path):
        self.name, self.port, self.log_path = name, port, log_path
        log("+", " ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
        for _ in range(6000):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited:\n{open(log_path).read()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not become ready")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def stream(self, prompt, n):
        """One streamed completion: (time to first token, total time)."""
        return stream_completion(self.port, prompt, n, self.name)


def claw_server(a, gguf, workdir):
    port = free_port()
    return Server("claw serve", [a.claw, "serve", "--model", gguf, "--port", str(port), "--num-threads",
                                 str(a.threads), "--max-num-seqs", "64", "--kv-cache-memory", "2GiB",
                                 "--kv-cache-dtype", a.kv, "--max-model-len", "1024"],
                  port, os.path.join(workdir, "claw.log"))


def llama_server(a, gguf, workdir, slots, ctx_per_slot):
    port = free_port()
    return Server("llama-server", [a.llama_server, "-m", gguf, "--host", "127.0.0.1", "--port", str(port), "-t",
                                   str(a.threads), "-tb", str(a.threads), "--parallel", str(slots), "-c",
                                   str(slots * ctx_per_slot), "--cache-type-k", a.kv, "--cache-type-v", a.kv,
                                   "--no-webui"],
                  port, os.path.join(workdir, f"llama-server-{slots}.log"))


def measure(start, ids, concurrency, copy_bandwidth):
    """The measurements on servers from start(slots, ctx_per_slot); claw's
    start ignores both (one server does it all)."""
    out = {"concurrency": {}}
    s = start(1, 1024)
    try:
        s.stream(ids(16), 4)  # warm-up
        before = copy_bandwidth()
        runs = []
        for _ in range(3):
            first, total = s.stream(ids(16), 64)
            runs.append(63 / (total - first))
        out["copy_GB_s"] = (before + copy_bandwidth()) / 2 / 1e9
        out["decode_tok_s"] = max(runs)
        ttft = min(s.stream(ids(512), 1)[0] for _ in range(2))
        out["prefill_tok_s"], out["ttft_ms"] = 512 / ttft, 1e3 * ttft
        for n in concurrency:
            if s.name == "llama-server":
                s.stop()
                s = start(n, 128)
                s.stream(ids(16), 2)
            wall, d = concurrent(lambda i: s.stream(ids(32), 32), n)
            out["concurrency"][n] = {"tok_s": n * 32 / wall, "p50_s": percentile(d, 50), "p99_s": percentile(d, 99)}
            log(f"  {s.name} {n} streams: {out['concurrency'][n]}")
    finally:
        s.stop()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", default="build/bin/claw")
    ap.add_argument("--llama-server", help="llama-server binary (default: tools/llamacpp_build.sh builds it)")
    ap.add_argument("--models", default="gpt2-124m,llama-1b")
    ap.add_argument("--types", default="f16,q8_0,q4_k_m,q6_k")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv", default="f16", help="KV cache type of both servers (f16 or q8_0)")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--workdir", default="/tmp/claw-bench-serve")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "llama_server_results.json"))
    a = ap.parse_args()
    a.claw = os.path.abspath(a.claw)
    if not a.llama_server:
        build = subprocess.run([os.path.join(ROOT, "tools", "llamacpp_build.sh"), "llama", "llama-server"],
                               check=True, capture_output=True, text=True).stdout.strip()
        a.llama_server = os.path.join(build, "bin", "llama-server")
    concurrency = [int(x) for x in a.concurrency.split(",")]
    quant_bench = os.path.join(os.path.dirname(a.claw), "bench_quant")

    def copy_bandwidth():
        roof = subprocess.run([quant_bench, "--copy-only", str(a.threads)], check=True, capture_output=True,
                              text=True).stdout
        return float(re.search(r"copy_GB_per_s=([0-9.]+)", roof).group(1)) * 1e9

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    results = {"machine": {"cpu": cpu, "threads": a.threads, "kv": a.kv}, "models": {}}
    for name in a.models.split(","):
        d = os.path.join(a.workdir, name)
        hf = os.path.join(d, "hf")
        os.makedirs(d, exist_ok=True)
        if not os.path.exists(os.path.join(hf, "config.json")):
            log(f"{name}: making random weights")
            make_model(name, hf)
        ck = os.path.join(d, "ck")
        if not os.path.exists(os.path.join(ck, "latest_checkpointed_iteration.txt")):
            subprocess.run([a.claw, "ckpt", "import", "--input", hf, "--save", ck], check=True,
                           stdout=subprocess.DEVNULL)
        cfg = json.load(open(os.path.join(hf, "config.json")))
        vocab = cfg["vocab_size"]
        layers = cfg.get("n_layer") or cfg["num_hidden_layers"]
        kv_dim = cfg["n_embd"] if cfg["model_type"] == "gpt2" else \
            cfg["hidden_size"] // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
        kv_per_pos = 2 * layers * kv_dim * (2 if a.kv == "f16" else 34 / 32)
        rng = random.Random(1)
        ids = lambda n: [rng.randrange(256, vocab - 1) for _ in range(n)]  # noqa: E731
        res = results["models"][name] = {}
        for t in a.types.split(","):
            g = os.path.join(d, f"{t}.gguf")
            if not os.path.exists(g):
                subprocess.run([a.claw, "ckpt", "export", "--load", ck, "--format", "gguf", "--type", t, "--output",
                                g], check=True, stdout=subprocess.DEVNULL)
            log(f"{name} {t}: claw serve")
            claw = measure(lambda slots, ctx: claw_server(a, g, d), ids, concurrency, copy_bandwidth)
            m = re.search(r"([0-9.]+) MiB read a token", open(os.path.join(d, "claw.log")).read())
            weight_bytes = float(m.group(1)) * 2**20
            log(f"{name} {t}: llama-server")
            peer = measure(lambda slots, ctx: llama_server(a, g, d, slots, ctx), ids, concurrency, copy_bandwidth)
            bytes_per_token = weight_bytes + kv_per_pos * 48  # the decode runs' mean context
            for engine, r in (("claw", claw), ("llama-server", peer)):
                r["weight_mib"] = weight_bytes / 2**20
                r["pct_roofline"] = 100 * r["decode_tok_s"] / (r["copy_GB_s"] * 1e9 / bytes_per_token)
                res.setdefault(engine, {})[t] = r
                log(f"  {engine}: {json.dumps(r)}")
            json.dump(results, open(a.out, "w"), indent=1)
    print(table(results, concurrency))


def table(r, concurrency):
    m = r["machine"]
    lines = [f"Machine: {m['cpu']}, {m['threads']} threads; KV cache {m['kv']} in both servers. % roofline: decode "
             "tok/s over (copy bandwidth around the decode runs / bytes a token reads).", "",
             "| model | GGUF | server | decode tok/s | % roofline | copy GB/s | prefill 512 tok/s | TTFT 512 ms | " +
             " | ".join(f"{n} streams tok/s (p50/p99 s)" for n in concurrency) + " |",
             "|---|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(concurrency)]
    for name, res in r["models"].items():
        for t in res.get("claw", {}):
            for engine in ("claw", "llama-server"):
                x = res[engine][t]
                conc = " | ".join(f"{x['concurrency'][n]['tok_s']:.1f} ({x['concurrency'][n]['p50_s']:.2f}/"
                                  f"{x['concurrency'][n]['p99_s']:.2f})" for n in concurrency)
                lines.append(f"| {name} | {t} | {engine} | {x['decode_tok_s']:.1f} | {x['pct_roofline']:.0f}% | "
                             f"{x['copy_GB_s']:.1f} | {x['prefill_tok_s']:.0f} | {x['ttft_ms']:.0f} | {conc} |")
    lines += ["", "| model | GGUF | decode claw / llama-server | prefill | " +
              " | ".join(f"{n} streams" for n in concurrency) + " |", "|---|---|---:|---:|" + "---:|" * len(concurrency)]
    for name, res in r["models"].items():
        for t in res.get("claw", {}):
            c, p = res["claw"][t], res["llama-server"][t]
            ratios = " | ".join(f"{c['concurrency'][n]['tok_s'] / p['concurrency'][n]['tok_s']:.2f}x"
                                for n in concurrency)
            lines.append(f"| {name} | {t} | {c['decode_tok_s'] / p['decode_tok_s']:.2f}x | "
                         f"{c['prefill_tok_s'] / p['prefill_tok_s']:.2f}x | {ratios} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
