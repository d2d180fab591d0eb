#!/usr/bin/env python3
"""claw's CUDA backend against PyTorch on the same GPU, in one run.

Runs on a machine with an NVIDIA GPU and PyTorch 2.x (the peer). For each
config (model:micro-batch:seq) it times, step by step after a warm-up:
  - claw train --device cuda in each of --claw-variants: fp32 (IEEE GEMMs:
    the CPU backend's numbers), fp32-tf32 (--allow-tf32), bf16 (--bf16);
  - the PyTorch GPT-2 of bench/drivers/torch_gpt.py (transformers' Llama for the
    Llama shape) on the GPU in each of --variants: fp32 (TF32 off), fp32 with
    TF32, bf16 autocast, and bf16 autocast under torch.compile;
and measures the roof in the same run: a bf16 8192^3 matmul through torch and
claw's own cuBLAS measurement (claw info --device cuda). MFU is the model's
FLOPs per second over that bf16 peak (6 N + attention, as claw counts).

  python3 bench/drivers/bench_cuda.py --claw build-cuda/bin/claw --configs gpt2-124m:8:1024,llama3.2-1b:2:1024 [--out F]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

MODELS = {
    "gpt2-124m": dict(layers=12, hidden=768, heads=12, groups=12, ffn=3072, vocab=50257, padded=50304, swiglu=False),
    # Llama 3.2 1B's shape; the peer is transformers' LlamaForCausalLM (sdpa attention), randomly initialised.
    "llama3.2-1b": dict(layers=16, hidden=2048, heads=32, groups=8, ffn=8192, vocab=128256, padded=128256, swiglu=True),
}
P = 1024


def flops_per_token(m, T):
    L, C, F = m["layers"], m["hidden"], m["ffn"]
    kv = C // m["heads"] * m["groups"]
    mlp = (3 if m["swiglu"] else 2) * C * F
    n = L * (2 * C * C + 2 * C * kv + mlp) + m["padded"] * C  # the layers' matrices + the LM head
    return 6 * n + 6 * L * C * T  # + attention scores and values (causal half of 12 L C T)


def torch_peak_tflops(torch):
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = 1e9
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        best = min(best, s.elapsed_time(e))
    return 2 * n ** 3 / (best * 1e-3) / 1e12


def run_torch(torch, variant, name, m, B, T, steps, warmup):
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = variant == "fp32-tf32"
    torch.backends.cudnn.allow_tf32 = variant == "fp32-tf32"
    torch.manual_seed(0)
    V = m["vocab"]
    if name.startswith("llama"):
        import transformers
        cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=m["hidden"], intermediate_size=m["ffn"],
                                       num_hidden_layers=m["layers"], num_attention_heads=m["heads"],
                                       num_key_value_heads=m["groups"], max_position_embeddings=8192,
                                       rope_theta=500000.0, tie_word_embeddings=True, attn_implementation="sdpa")
        model = transformers.LlamaForCausalLM(cfg).cuda()

        def forward(idx, tgt):
            logits = model(input_ids=idx).logits
            return F.cross_entropy(logits.view(-1, V).float(), tgt.view(-1))
    else:
        import torch_gpt
        model = torch_gpt.GPT(m["layers"], m["hidden"], m["heads"], m["padded"], P).cuda()

        # torch_gpt's forward builds positions on the default device: give it the GPU's.
        def forward(idx, tgt):
            x = model.wte(idx) + model.wpe(torch.arange(T, device="cuda"))
            for blk in model.blocks:
                x = blk(x)
            logits = F.linear(model.ln_f(x), model.wte.weight[:V])
            return F.cross_entropy(logits.view(-1, V).float(), tgt.view(-1))
    fwd = torch.compile(forward) if variant.endswith("compile") else forward
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    g = torch.Generator(device="cuda").manual_seed(1)
    idx = torch.randint(0, min(V, 50257), (B, T), device="cuda", generator=g)
    tgt = torch.randint(0, min(V, 50257), (B, T), device="cuda", generator=g)
    bf16 = variant.startswith("bf16")
    times = []
    for step in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = fwd(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    del model, opt
    torch.cuda.empty_cache()
    return {"ms_per_step": 1e3 * statistics.median(times), "loss": loss.item()}


def run_claw(claw, model, B, T, steps, warmup, data_dir, extra=()):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        cmd = [claw, "train", "--device", "cuda", "--model", model, "--micro-batch-size", str(B), "--seq-length", str(T),
               "--train-iters", str(warmup + steps), "--eval-interval", "0", "--metrics-file", metrics,
               "--log-interval", "1000"]
        if data_dir:
            cmd += ["--data-dir", data_dir]
        cmd += list(extra)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return {"error": (r.stderr or r.stdout)[-2000:]}
        recs = [json.loads(l) for l in open(metrics)]
    return {"ms_per_step": statistics.median(r["step_ms"] for r in recs[warmup:]), "loss": recs[-1]["loss"],
            "mfu_reported": statistics.median(r["mfu"] for r in recs[warmup:])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", default=os.path.join(HERE, "..", "..", "build-cuda", "bin", "claw"))
    ap.add_argument("--configs", default="gpt2-124m:8:1024")
    ap.add_argument("--claw-variants", default="fp32,fp32-tf32,bf16")
    ap.add_argument("--variants", default="fp32,fp32-tf32,bf16,bf16-compile",
                    help="PyTorch variants; bf16-compile runs for GPT-2 only unless --compile-llama "
                         "(compiling HF Llama takes minutes)")
    ap.add_argument("--compile-llama", action="store_true")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--data-dir", default="")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    import torch

    peak = torch_peak_tflops(torch)
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}, torch {torch.__version__}: bf16 matmul 8192^3 peak {peak:.0f} TFLOP/s", flush=True)
    rows = []
    for cfg in args.configs.split(","):
        name, B, T = cfg.split(":")
        B, T = int(B), int(T)
        m = MODELS[name]
        tokens = B * T
        flops = flops_per_token(m, T) * tokens
        claw_flags = {"fp32": [], "fp32-tf32": ["--allow-tf32"], "bf16": ["--bf16"]}
        res = {"claw " + v: run_claw(args.claw, name, B, T, args.steps, args.warmup, args.data_dir, claw_flags[v])
               for v in args.claw_variants.split(",") if v}
        for v in args.variants.split(","):
            if not v or (v.endswith("compile") and name.startswith("llama") and not args.compile_llama):
                continue
            try:
                res["torch " + v] = run_torch(torch, v, name, m, B, T, args.steps, args.warmup)
            except Exception as e:  # torch.compile may be unavailable; say so and go on
                res["torch " + v] = {"error": repr(e)[:300]}
        for who, r in res.items():
            if "error" in r:
                print(f"{cfg:20s} {who:22s} error: {r['error']}", flush=True)
                continue
            tps = tokens / (r["ms_per_step"] / 1e3)
            mfu = flops / (r["ms_per_step"] / 1e3) / (peak * 1e12)
            r.update(tokens_per_s=tps, mfu=mfu)
            print(f"{cfg:20s} {who:22s} {r['ms_per_step']:9.1f} ms/step {tps:10.0f} tok/s  MFU {100 * mfu:5.1f}%  "
                  f"loss {r['loss']:.4f}", flush=True)
        rows.append({"config": cfg, "results": res})
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": gpu, "torch": torch.__version__, "bf16_peak_tflops": peak, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
