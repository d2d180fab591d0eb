"""Single-stream decode of each model family claw imports: `claw generate` (the
serving engine, paged KV cache) against transformers' generate() on the same
random weights, in the same run, on the same threads, beside the memory
roofline measured around each row.

    PY=$(tools/torch2_env.sh)      # transformers 4.57 over torch 2.5: every family
    $PY bench/drivers/bench_families.py --claw build/bin/claw [--families qwen2.5-0.5b,...]

Shapes are the published small models' (the real vocabularies, tied as they
are); a family without a small member gets a cut-down shape of its own
(named so). transformers saves each with random weights (fp32); claw loads
the directory as it is. Measured per family, 32 tokens after a 16-token
prompt:
  - claw's decode tokens/s (its own log line) and time to first token;
  - transformers' decode tokens/s: (t(32 tokens) - t(1 token)) / 31, the
    best of two runs each (torch.set_num_threads: the same threads);
  - the roofline: copy bandwidth (build/bin/bench_quant --copy-only, just
    before the row) / the bytes a token reads (fp32 weights but the
    embedding table, of which it reads one row; plus its KV cache).
Results: a markdown table on stdout (for bench/RESULTS.md) and --json.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import torch
import transformers as tf

# name: (class, config kwargs); the published shapes of the small members.
FAMILIES = {
    "llama3.2-1b": ("LlamaForCausalLM", tf.LlamaConfig, dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, rope_theta=5e5, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192})),
    "qwen2.5-0.5b": ("Qwen2ForCausalLM", tf.Qwen2Config, dict(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, rope_theta=1e6, tie_word_embeddings=True, use_sliding_window=False)),
    "qwen3-0.6b": ("Qwen3ForCausalLM", tf.Qwen3Config, dict(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, rope_theta=1e6, tie_word_embeddings=True)),
    "gemma3-1b": ("Gemma3ForCausalLM", tf.Gemma3TextConfig, dict(
        vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4,
        num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256, sliding_window=512, rope_theta=1e6,
        rope_local_base_freq=1e4)),
    "olmo2-1b": ("Olmo2ForCausalLM", tf.Olmo2Config, dict(
        vocab_size=100352, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=16,
        num_key_value_heads=16, rope_theta=5e5, rms_norm_eps=1e-6, tie_word_embeddings=False)),
    # Cut-down shapes (the machine holds two fp32 copies): Mistral 7B's layers, 4 of them; Phi-3-mini's, 8; Gemma 2 2B's, 8;
    # Qwen3-30B-A3B's (128 experts, top 8), 2.
    "mistral-7b/4-layers": ("MistralForCausalLM", tf.MistralConfig, dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=4, num_attention_heads=32,
        num_key_value_heads=8, sliding_window=4096, tie_word_embeddings=False)),
    "phi-3-mini/8-layers": ("Phi3ForCausalLM", tf.Phi3Config, dict(
        vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=8, num_attention_heads=32,
        num_key_value_heads=32, sliding_window=2047, pad_token_id=0, tie_word_embeddings=False)),
    "gemma-2-2b/8-layers": ("Gemma2ForCausalLM", tf.Gemma2Config, dict(
        vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=256, sliding_window=4096,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0, tie_word_embeddings=True)),
    "qwen3-30b-a3b/2-layers": ("Qwen3MoeForCausalLM", tf.Qwen3MoeConfig, dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
        num_experts_per_tok=8, num_hidden_layers=2, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        rope_theta=1e6, norm_topk_prob=True, tie_word_embeddings=False)),
    # DeepSeek-V2-Lite's width (16 heads of 128 + 64 rotated from a 512 latent, 64 experts of 1408, top 6, two
    # shared) in DeepSeek-V3's class (sigmoid router), 2 layers: the first dense, the second experts.
    "deepseek-v2-lite/2-layers": ("DeepseekV3ForCausalLM", tf.DeepseekV3Config, dict(
        vocab_size=102400, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408, n_routed_experts=64,
        num_experts_per_tok=6, n_shared_experts=2, n_group=1, topk_group=1, routed_scaling_factor=1.0,
        first_k_dense_replace=1, num_hidden_layers=2, num_attention_heads=16, num_key_value_heads=16, q_lora_rank=None,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, rope_theta=1e4,
        tie_word_embeddings=False)),
}
PROMPT = [17, 250, 3, 999, 42, 7, 512, 88, 1, 640, 11, 23, 5, 77, 301, 9]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def make(name, out):
    cls, config_cls, kw = FAMILIES[name]
    if os.path.exists(os.path.join(out, "config.json")):
        return
    torch.manual_seed(0)
    model = getattr(tf, cls)(config_cls(max_position_embeddings=4096, torch_dtype="float32", **kw))
    model.save_pretrained(out, safe_serialization=True)


def token_bytes(model, context):
    """fp32 bytes a decoded token reads: every weight but the embedding table (one row of it), and the KV cache."""
    c = model.config
    params = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight
    tied = model.get_output_embeddings().weight.data_ptr() == embed.data_ptr()
    moe_unread = 0
    experts = getattr(c, "num_experts", 0) or getattr(c, "n_routed_experts", 0)
    if experts:
        per_expert = 3 * c.hidden_size * c.moe_intermediate_size
        dense = len(getattr(c, "mlp_only_layers", []) or []) + getattr(c, "first_k_dense_replace", 0)
        moe_unread = (c.num_hidden_layers - dense) * (experts - c.num_experts_per_tok) * per_expert
    read = params - moe_unread - (0 if tied else embed.numel()) + embed.shape[1]
    if getattr(c, "kv_lora_rank", None):  # MLA: claw caches the absorbed latent, key and value at once
        kv = c.num_hidden_layers * (c.kv_lora_rank + c.qk_rope_head_dim) * context
    else:
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        kv = 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * context
    return 4 * (read + kv)


def claw_decode(claw, hf_dir, n, threads):
    best = None
    for _ in range(2):
        r = subprocess.run([claw, "generate", "--model", hf_dir, "--prompt-tokens", ",".join(map(str, PROMPT)),
                            "--max-tokens", str(n), "--ignore-eos", "--num-threads", str(threads),
                            "--output-format", "json"], capture_output=True, text=True, check=True)
        m = re.search(r"time to first token ([0-9.]+) ms \| decode ([0-9.]+) tok/s", r.stderr)
        if not m:
            sys.exit(f"claw generate printed no timing:\n{r.stderr}")
        run = (float(m.group(2)), float(m.group(1)))
        best = run if best is None or run[0] > best[0] else best
    return best


def hf_decode(model, n):
    prompt = torch.tensor([PROMPT])

    def timed(k):
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=k, min_new_tokens=k,
                           do_sample=False, pad_token_id=0)
        return time.perf_counter() - t0

    one = min(timed(1) for _ in range(2))
    full = min(timed(n) for _ in range(2))
    return (n - 1) / (full - one)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--claw", required=True)
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--workdir", default="/tmp/claw-bench-families")
    p.add_argument("--json", default="")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    quant_bench = os.path.join(os.path.dirname(a.claw), "bench_quant")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    rows = []
    for name in a.families.split(","):
        d = os.path.join(a.workdir, name.replace("/", "_"))
        log(f"{name}: weights")
        make(name, d)
        model = tf.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
        copy = subprocess.run([quant_bench, "--copy-only", str(a.threads)], check=True, capture_output=True,
                              text=True).stdout
        bandwidth = float(re.search(r"copy_GB_per_s=([0-9.]+)", copy).group(1)) * 1e9
        roof = bandwidth / token_bytes(model, len(PROMPT) + a.tokens)
        log(f"{name}: claw generate")
        claw_tps, ttft = claw_decode(a.claw, d, a.tokens, a.threads)
        log(f"{name}: transformers generate()")
        hf_tps = hf_decode(model, a.tokens)
        rows.append({"family": name, "class": FAMILIES[name][0],
                     "params_M": sum(p.numel() for p in model.parameters()) / 1e6, "claw_tok_s": claw_tps,
                     "claw_ttft_ms": ttft, "hf_tok_s": hf_tps, "roofline_tok_s": roof, "copy_GB_s": bandwidth / 1e9})
        log(f"{name}: claw {claw_tps:.1f} tok/s, transformers {hf_tps:.1f} tok/s, roofline {roof:.1f}")
        del model
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu, "threads": a.threads, "tokens": a.tokens, "rows": rows}, f, indent=1)
    print(f"Machine: {cpu}, {a.threads} threads; {a.tokens} tokens after {len(PROMPT)}, one stream, fp32 weights; "
          f"transformers {tf.__version__} over torch {torch.__version__.split('+')[0]}.\n")
    print("| family (class) | parameters | claw decode tok/s | transformers tok/s | claw / transformers | "
          "% roofline (claw) | copy GB/s | claw TTFT ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['family']} ({r['class']}) | {r['params_M']:.0f}M | {r['claw_tok_s']:.1f} | {r['hf_tok_s']:.1f} | "
              f"{r['claw_tok_s'] / r['hf_tok_s']:.2f}x | {100 * r['claw_tok_s'] / r['roofline_tok_s']:.0f}% | "
              f"{r['copy_GB_s']:.1f} | {r['claw_ttft_ms']:.0f} |")


if __name__ == "__main__":
    main()
