#!/usr/bin/python3
"""PyTorch peer for claw's training benchmark: the same GPT-2 model, batch,
AdamW and clipping, timed per step. Prints one JSON line with the figures.

A standard nn.Module GPT-2 (pre-norm blocks, fused QKV as in GPT-2, tanh
GELU, tied embeddings, padded vocabulary), fp32, torch.optim.AdamW with
foreach updates. Attention uses F.scaled_dot_product_attention where the
installed torch has it (2.x), else the explicit softmax (Debian's 1.13),
with the scale and the causal mask folded into one baddbmm.

The LM head multiplies by the embedding's first `vocab` rows only (a view):
the padded rows never produce logits, so the loss needs no slice of the
[B*T, Vp] logits (a copy forward, a zero-filled [B, T, Vp] gradient
backward) and gives exactly the same numbers.

  torch_gpt.py --layers 12 --hidden 768 --heads 12 --batch 4 --seq 256 --threads 2,1 --steps 8

--autocast bf16 runs forward and loss under torch.autocast("cpu",
dtype=torch.bfloat16), PyTorch's mixed precision on the CPU: linear layers
and attention products on bf16 copies of their operands (oneDNN), fp32
parameters, gradients and AdamW state.
"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fc_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            D = C // self.H
            q, k, v = (t.reshape(B * self.H, T, D) for t in (q, k, v))
            bias = torch.full((T, T), float("-inf")).triu(1)  # 0 on and below the diagonal
            att = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=1.0 / math.sqrt(D))
            y = torch.bmm(torch.softmax(att, dim=-1), v).view(B, self.H, T, D)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, H, V, P):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(P, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for m in self.modules():  # GPT-2's N(0, 0.02) init keeps the loss at ~ln(V)
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets, vocab):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight[:vocab])
        return F.cross_entropy(logits.view(-1, vocab), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--padded-vocab", type=int, default=50304)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--threads", default="0",
                    help="intra-op threads; a comma list (e.g. 2,1) times each, step by step in turn, and reports "
                         "the fastest; 0: leave torch's default")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none")
    args = ap.parse_args()
    import contextlib
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.autocast == "bf16" else contextlib.nullcontext
    counts = [int(t) for t in args.threads.split(",")]
    torch.manual_seed(0)
    model = GPT(args.layers, args.hidden, args.heads, args.padded_vocab, args.positions)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            foreach=True)  # 1.13's default is the per-tensor loop
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    tgt = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    # Thread counts take turns step by step, so a load that comes and goes
    # on a shared machine weighs on each alike.
    per_count = {}
    for step in range(args.warmup + args.steps):
        for n in counts:
            if n > 0:  # 0: torch's own default
                torch.set_num_threads(n)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = model(idx, tgt, args.vocab)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if step >= args.warmup:
                per_count.setdefault(torch.get_num_threads(), []).append(time.perf_counter() - t0)
    median = {n: sorted(t)[len(t) // 2] for n, t in per_count.items()}
    best = min(median, key=median.get)
    times = per_count[best]
    times.sort()
    print(json.dumps({
        "torch": torch.__version__,
        "autocast": args.autocast,
        "threads": best,
        "ms_per_step": 1e3 * times[len(times) // 2],
        "ms_per_step_by_threads": {str(n): 1e3 * m for n, m in median.items()},
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "loss": float(loss),
        "params": sum(p.numel() for p in model.parameters()),
    }))


if __name__ == "__main__":
    main()
