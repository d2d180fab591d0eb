#!/usr/bin/python3
"""PyTorch reference for claw's decoder (GPT-2 and Llama variants).

Runs claw's parity_dump tool, then rebuilds the same model in PyTorch from the
dumped initial weights, written independently of claw in the conventions of
Hugging Face's GPT-2 and Llama modelling code (tanh GELU, rotate-half RoPE,
repeat_kv for grouped-query attention), in float64, and checks:

  1. logits and loss of the first batch at the initial weights;
  2. every parameter gradient of that batch (claw accumulates them over
     micro-batches; the reference uses the whole batch);
  3. loss and gradient norm over N steps of torch.optim.AdamW with the same
     hyper-parameters, warmup + cosine schedule and global-norm clipping.

With --dpo-beta BETA [--dpo-loss sigmoid|ipo|hinge] the loss is DPO's,
written here from its formula: pairs of rows (chosen, rejected) sharing a
prompt, h = (log pi - log pi_ref)(chosen) - (log pi - log pi_ref)(rejected)
with the reference the initial weights (its log-probabilities computed here,
in float64), sigmoid: -log sigmoid(beta h), ipo: (h - 1/(2 beta))^2 on
per-token means, hinge: max(0, 1 - beta h); the mean over pairs. Besides the
checks above, every step is checked at the weights claw had then (so that
Adam's amplification of rounding noise along the trajectory does not enter):
its loss (1e-6 relative) and each gradient tensor (1e-5 in relative L2 norm:
claw's float32 attention backward leaves ~3e-6 in the query and key
projections' gradients, as it does under the language-model loss).
Along the trajectory the DPO loss, a difference of sequence sums, drifts
sooner than the language-model loss, so that tolerance is 1e-4 there.

With --grpo-generations G [--kl-beta B] [--importance-correction]
[--loss-agg-mode token-mean|seq-mean-token-mean] [--advantage-no-std] the
loss is GRPO's, written here from its formula (DeepSeekMath eq. 3 with
DAPO's clip-higher and a truncated importance weight): rows are completions
in groups of G with claw's random rewards, advantages (r - mean) / (std +
1e-4) per group (unbiased std), rho = exp(lp - old) with old the behaviour
log-probabilities claw dumps (or, with the correction, the proximal ones, as
data), each token's loss -w min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)
+ beta (exp(ref - lp) - (ref - lp) - 1) with the reference the initial
weights and w = min(exp(prox - beh), C) with the correction (else 1),
aggregated over tokens or per sequence. The same per-step checks as DPO's:
the loss (1e-6 of the mean absolute token loss: a group's advantages sum to
zero, so the loss itself can be near zero) and the gradients (1e-5).

MoE presets (mixtral-tiny, deepseek-tiny) add the MoE layer written here
from the published formulas (Reference.moe): top-k routing by softmax over
the chosen logits or by sigmoid scores with the expert bias choosing only,
SwiGLU experts, a shared expert, and per micro-batch (claw's accumulation
unit) the load-balancing loss coeff E sum f_i P_i and the z-loss, whose mean
over micro-batches joins the objective; the compared loss is the language
model's. After each AdamW step the expert biases move by rate x sign(mean
load - load), and the final biases are compared.

With --freeze PATTERNS claw trains with those parameters frozen and the
reference sets requires_grad=False on the same ones (the list claw dumps):
claw must dump no gradient for them, the norm, clipping and AdamW cover the
trainable ones only, the frozen parameters end bitwise equal to their
initial values and the trainable ones equal the reference's after N steps.

claw computes in float32 and the reference in float64, so every difference
is claw's rounding error. Tolerances (see TOLERANCES) are stated relative to
the size of each compared tensor.

Run with Debian's interpreter (/usr/bin/python3), which sees python3-torch.
"""
import argparse
import json
import math
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

# Relative tolerances, each measured error being a few times below them
# (see bench/RESULTS.md for the measured values). fp32 GEMMs over K <= 4C
# terms with values O(1) carry ~1e-6 relative error; softmax over 50k classes
# and the backward chain compound it to ~1e-5 in the worst gradient entry.
# Over 10 AdamW steps the differences compound: Adam divides by sqrt(v), so
# for entries whose gradient is at the level of fp32 rounding noise the
# update is +-lr with a noise-determined sign. The loss averages over all of
# them and stays within ~1e-6 (measured 5e-7); the gradient norm, dominated by
# fewer entries, moves by ~1e-4 (measured 1.5e-4 for llama-tiny).
TOLERANCES = {
    "logits": 1e-5,      # max |diff| / max |ref|
    "loss": 1e-5,        # |diff| / |ref|
    "grad": 2e-5,        # per tensor: max |diff| / max(max |ref|, 1e-3 * largest max |ref| of any tensor)
    "step_loss": 1e-5,   # per step, relative
    "grad_norm": 1e-3,   # per step, relative
    # Final trainable parameters after N steps (--freeze runs), per tensor:
    # max |diff| / max |update of the reference| (measured 1.3e-3 for
    # gpt2-tiny, 3.8e-3 for llama-tiny). Adam's normalised step turns fp32
    # rounding in the few near-zero gradient entries into a visible part of
    # an update (see grad_norm), so this is looser than the gradients'.
    "final_param": 2e-2,
}

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, v in header.items():
        b, e = v["data_offsets"]
        arr = np.frombuffer(data[base + b:base + e], dtype=DTYPES[v["dtype"]]).reshape(v["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out, meta


class Reference:
    def __init__(self, cfg, params, frozen=(), buffers=(), accum=1):
        self.cfg = cfg
        self.P = {k: v.to(torch.float64).requires_grad_(k not in frozen) for k, v in params.items() if k not in buffers}
        self.buffers = {k: params[k].to(torch.float64) for k in buffers}
        self.accum = accum  # micro-batches a batch is cut into (MoE auxiliary losses are per micro-batch)
        self.aux = 0.0      # the last logits() call's MoE auxiliary losses (their mean over micro-batches)
        self.loads = {}     # per MoE layer: tokens each expert ran since the last bias update

    def ffn(self, x, p):
        """A SwiGLU or GELU FFN with weights p.gate_proj/up_proj/down_proj (fc/proj), any leading shape."""
        if self.cfg["mlp"] == "gelu":
            return self.linear(F.gelu(self.linear(x, p + ".fc"), approximate="tanh"), p + ".proj")
        return self.linear(F.silu(self.linear(x, p + ".gate_proj")) * self.linear(x, p + ".up_proj"), p + ".down_proj")

    def moe(self, h, l):
        """A MoE layer from the published formulas (Mixtral's top-k softmax or DeepSeek-V3's sigmoid with the
        expert bias choosing only; Switch's load-balancing loss, the router z-loss), per micro-batch."""
        m = self.cfg["moe"]
        p = f"layers.{l}.mlp."
        B, T, C = h.shape
        x = h.reshape(-1, C)
        E, k = m["num_experts"], m["topk"]
        gelu = self.cfg["mlp"] == "gelu"
        W = {n: self.P[p + "experts." + n + ".weight"] for n in (("fc", "proj") if gelu else ("gate_proj", "up_proj", "down_proj"))}
        bias = self.buffers.get(p + "router.expert_bias", torch.zeros(E, dtype=torch.float64))
        out = torch.zeros_like(x)
        n = x.shape[0] // self.accum
        loads = self.loads.setdefault(l, torch.zeros(E, dtype=torch.float64))
        for a in range(self.accum):
            xs = x[a * n:(a + 1) * n]
            logits = xs @ self.P[p + "router.weight"].t()
            if m["score"] == "softmax":
                idx = torch.topk(logits.detach() + bias, k, dim=-1).indices
                probs = torch.softmax(torch.gather(logits, 1, idx), dim=-1)
                scores = torch.softmax(logits, dim=-1)
            else:
                s = torch.sigmoid(logits)
                idx = torch.topk(s.detach() + bias, k, dim=-1).indices
                chosen = torch.gather(s, 1, idx)
                probs = chosen / (chosen.sum(-1, keepdim=True) + 1e-20) if k > 1 else chosen
                scores = s / (s.sum(-1, keepdim=True) + 1e-20)
            ys = torch.zeros_like(xs)
            for e in range(E):
                hit = idx == e  # [n, k]
                rows = hit.any(-1)
                if not rows.any():
                    continue
                w = (probs * hit).sum(-1)[rows]
                xe = xs[rows]
                if gelu:
                    he = F.gelu(xe @ W["fc"][e].t(), approximate="tanh") @ W["proj"][e].t()
                else:
                    he = (F.silu(xe @ W["gate_proj"][e].t()) * (xe @ W["up_proj"][e].t())) @ W["down_proj"][e].t()
                ys = ys.index_add(0, rows.nonzero().flatten(), w[:, None] * he)
                loads[e] += float(hit.sum())
            out = torch.cat([out[:a * n], ys, out[(a + 1) * n:]]) if self.accum > 1 else ys
            routed = torch.zeros(E, dtype=torch.float64)
            for e in torch.topk(scores.detach(), k, dim=-1).indices.flatten():
                routed[e] += 1
            aux = m["aux_coeff"] * E * torch.sum(routed / (n * k) * scores.mean(0))
            z = m["z_coeff"] * torch.mean(torch.logsumexp(logits, dim=-1) ** 2)
            self.aux = self.aux + (aux + z) / self.accum
        if m["shared"] > 0:
            out = out + self.ffn(x, p + "shared_experts")
        return out.reshape(B, T, C)

    def update_expert_bias(self):
        m = self.cfg.get("moe")
        if not m or not m["expert_bias"]:
            return
        for l, load in self.loads.items():
            b = self.buffers[f"layers.{l}.mlp.router.expert_bias"]
            b += m["bias_rate"] * torch.sign(load.mean() - load)
        self.loads = {}

    def norm(self, x, prefix):
        c = self.cfg
        w = self.P[prefix + ".weight"]
        if c["normalization"] == "LayerNorm":
            return F.layer_norm(x, (x.shape[-1],), w, self.P[prefix + ".bias"], c["norm_epsilon"])
        var = x.pow(2).mean(-1, keepdim=True)  # Hugging Face LlamaRMSNorm
        return w * (x * torch.rsqrt(var + c["norm_epsilon"]))

    def linear(self, x, prefix):
        b = self.P.get(prefix + ".bias")
        return F.linear(x, self.P[prefix + ".weight"], b)

    def rope(self, T, D):
        inv_freq = 1.0 / (self.cfg["rotary_base"] ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
        t = torch.arange(T, dtype=torch.float64)
        freqs = torch.outer(t, inv_freq.to(torch.float64))
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    @staticmethod
    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def logits(self, tokens):
        c = self.cfg
        B, T = tokens.shape
        H, G, D = c["num_attention_heads"], c["num_query_groups"], c["head_dim"]
        x = self.P["embedding.word_embeddings.weight"][tokens]
        if c["position_embedding_type"] == "learned_absolute":
            x = x + self.P["embedding.position_embeddings.weight"][:T]
        mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
        self.aux = 0.0
        for l in range(c["num_layers"]):
            p = f"layers.{l}."
            h = self.norm(x, p + "input_norm")
            q = self.linear(h, p + "attention.q_proj").view(B, T, H, D).transpose(1, 2)
            k = self.linear(h, p + "attention.k_proj").view(B, T, G, D).transpose(1, 2)
            v = self.linear(h, p + "attention.v_proj").view(B, T, G, D).transpose(1, 2)
            if c["position_embedding_type"] == "rope":
                cos, sin = self.rope(T, D)
                q = q * cos + self.rotate_half(q) * sin
                k = k * cos + self.rotate_half(k) * sin
            k = k.repeat_interleave(H // G, dim=1)  # Hugging Face repeat_kv
            v = v.repeat_interleave(H // G, dim=1)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D) + mask, dim=-1) @ v
            x = x + self.linear(att.transpose(1, 2).reshape(B, T, H * D), p + "attention.o_proj")
            h = self.norm(x, p + "post_attention_norm")
            if c.get("moe") and c["moe"]["layers"][l]:
                x = x + self.moe(h, l)
            elif c["mlp"] == "gelu":
                a = F.gelu(self.linear(h, p + "mlp.fc"), approximate="tanh")
                x = x + self.linear(a, p + "mlp.proj")
            else:
                a = F.silu(self.linear(h, p + "mlp.gate_proj")) * self.linear(h, p + "mlp.up_proj")
                x = x + self.linear(a, p + "mlp.down_proj")
        x = self.norm(x, "final_norm")
        W = self.P["embedding.word_embeddings.weight" if c["tied"] else "output_layer.weight"]
        return x @ W.t()

    def loss(self, logits, targets):
        V = self.cfg["vocab_size"]
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1).long())


def sequence_logps(ref, logits, targets):
    """Each row's summed log-probability of its targets (-1: not learned) and its count of them."""
    V = ref.cfg["vocab_size"]
    lp = -F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1).long(), ignore_index=-1,
                          reduction="none").reshape(targets.shape)
    return lp.sum(-1), (targets >= 0).sum(-1).double()


def dpo_loss(ref, logits, targets, reference, beta, kind):
    lp, n = sequence_logps(ref, logits, targets)
    if kind == "ipo":
        lp, reference = lp / n, reference / n
    d = lp - reference
    h = d[0::2] - d[1::2]
    if kind == "sigmoid":
        losses = -F.logsigmoid(beta * h)
    elif kind == "ipo":
        losses = (h - 1 / (2 * beta)) ** 2
    else:
        losses = torch.relu(1 - beta * h)
    return losses.mean()


def token_logps(ref, logits, targets):
    """Each position's log-probability of its target (0 where the target is -1)."""
    V = ref.cfg["vocab_size"]
    return -F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1).long().clamp(min=0),
                            reduction="none").reshape(targets.shape)


def grpo_advantages(rewards, G, no_std):
    r = rewards.reshape(-1, G)
    a = r - r.mean(-1, keepdim=True)
    if not no_std:
        a = a / (r.std(-1, keepdim=True) + 1e-4)
    return a.reshape(-1)


def grpo_loss(ref, logits, targets, behaviour, proximal, reference, rewards, g):
    """GRPO's loss and the mean absolute token loss (the scale its error is measured on)."""
    mask = (targets >= 0).double()
    lp = token_logps(ref, logits, targets)
    A = grpo_advantages(rewards, g["num_generations"], g["advantage_no_std"])[:, None]
    beh = behaviour.double()
    if g["importance_correction"]:
        old = proximal.double() if proximal is not None else lp.detach()
        w = torch.exp(old - beh).clamp(max=g["is_truncation"])
    else:
        old, w = beh, torch.ones_like(beh)
    rho = torch.exp(lp - old)
    surrogate = torch.minimum(rho * A, rho.clamp(1 - g["clip_eps_low"], 1 + g["clip_eps_high"]) * A)
    l = -w * surrogate
    if g["kl_beta"] > 0:
        d = reference - lp
        l = l + g["kl_beta"] * (torch.exp(d) - d - 1)
    l = l * mask
    if g["loss_agg_mode"] == "token-mean":
        loss = l.sum() / mask.sum()
    else:
        loss = (l.sum(-1) / mask.sum(-1)).mean()
    return loss, float(l.abs().sum() / mask.sum())


def lr_at(step, max_lr, min_lr, warmup, decay):
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if step >= decay:
        return min_lr
    ratio = (step - warmup) / (decay - warmup)
    return min_lr + (max_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * ratio))


def rel(a, b):
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump-tool", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--workdir")
    ap.add_argument("--freeze", default="", help="comma-separated glob patterns of parameters claw freezes")
    ap.add_argument("--vocab-size", type=int, default=0, help="override the preset's vocabulary")
    ap.add_argument("--moe-z-loss-coeff", type=float, default=-1.0, help="override the preset's router z-loss")
    ap.add_argument("--dpo-beta", type=float, default=0.0, help="DPO's loss with this beta (0: language-model loss)")
    ap.add_argument("--dpo-loss", default="sigmoid", choices=["sigmoid", "ipo", "hinge"])
    ap.add_argument("--grpo-generations", type=int, default=0, help="GRPO's loss over groups of this many rows")
    ap.add_argument("--kl-beta", type=float, default=0.0)
    ap.add_argument("--importance-correction", action="store_true")
    ap.add_argument("--loss-agg-mode", default="token-mean", choices=["token-mean", "seq-mean-token-mean"])
    ap.add_argument("--advantage-no-std", action="store_true")
    ap.add_argument("--learner-batch-invariant", action="store_true",
                    help="claw's forward in the generation engine's batch-invariant kernels")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or tmp
        extra = (["--freeze", args.freeze] if args.freeze else []) + \
                (["--vocab-size", str(args.vocab_size)] if args.vocab_size else []) + \
                (["--moe-z-loss-coeff", str(args.moe_z_loss_coeff)] if args.moe_z_loss_coeff >= 0 else []) + \
                (["--dpo-beta", str(args.dpo_beta), "--dpo-loss", args.dpo_loss] if args.dpo_beta else []) + \
                (["--grpo-generations", str(args.grpo_generations), "--kl-beta", str(args.kl_beta),
                  "--loss-agg-mode", args.loss_agg_mode] +
                 (["--importance-correction"] if args.importance_correction else []) +
                 (["--advantage-no-std"] if args.advantage_no_std else []) +
                 (["--learner-batch-invariant"] if args.learner_batch_invariant else []) if args.grpo_generations else [])
        subprocess.run([args.dump_tool, "--model", args.model, "--out", work, "--steps", str(args.steps)] + extra,
                       check=True)
        init, meta = read_safetensors(f"{work}/init.safetensors")
        meta = json.loads(meta["meta"])
        batch, _ = read_safetensors(f"{work}/batch.safetensors")
        step0, _ = read_safetensors(f"{work}/step0.safetensors")
        final, _ = read_safetensors(f"{work}/final.safetensors")
        with open(f"{work}/result.json") as f:
            claw = json.load(f)
        dpo_steps = [read_safetensors(f"{work}/dpo_step{s}.safetensors")[0] for s in range(args.steps)] \
            if args.dpo_beta else []
        grpo_steps = [read_safetensors(f"{work}/grpo_step{s}.safetensors")[0] for s in range(args.steps)] \
            if args.grpo_generations else []
        grpo_data = read_safetensors(f"{work}/grpo.safetensors")[0] if args.grpo_generations else None

    cfg, adam = meta["config"], meta["adam"]
    frozen = set(meta.get("frozen", []))
    ref = Reference(cfg, init, frozen, set(meta.get("buffers", [])), meta["accum"])
    failures = []
    dpo = meta.get("dpo")
    grpo = meta.get("grpo")
    label = args.model + (" frozen" if frozen else "") + (f" DPO {dpo['loss']} beta {dpo['beta']}" if dpo else "")
    if grpo:
        label += (f" GRPO G={grpo['num_generations']} kl {grpo['kl_beta']} {grpo['loss_agg_mode']}" +
                  (" IS-corrected" if grpo["importance_correction"] else "") +
                  (" no-std" if grpo["advantage_no_std"] else ""))

    def check(what, err, tol):
        status = "ok" if err <= tol else "FAIL"
        print(f"{label} {what}: {err:.3e} (tolerance {tol:.0e}) {status}")
        if err > tol:
            failures.append(what)

    tokens, targets = batch["tokens"].long(), batch["targets"].long()
    if dpo:
        with torch.no_grad():  # the reference: the initial weights
            reference = [sequence_logps(ref, ref.logits(tokens[s]), targets[s])[0] for s in range(args.steps)]
    if grpo:
        with torch.no_grad():  # the reference: the initial weights
            reference = [token_logps(ref, ref.logits(tokens[s]), targets[s]) for s in range(args.steps)]
        proximal = [d["proximal"] for d in grpo_steps]

    def step_loss(s, logits, scale=None, own_proximal=False):
        if dpo:
            return dpo_loss(ref, logits, targets[s], reference[s], dpo["beta"], dpo["loss"])
        if grpo:
            loss, mean_abs = grpo_loss(ref, logits, targets[s], grpo_data["behaviour"][s],
                                       None if own_proximal else proximal[s],
                                       reference[s], grpo_data["rewards"][s], grpo)
            if scale is not None:
                scale.append(mean_abs)
            return loss
        # The language-model loss (what claw reports) is returned; the MoE
        # auxiliary losses join the objective through lm_loss's gradient.
        return ref.loss(logits, targets[s])

    def objective(loss):
        return loss + ref.aux if not (dpo or grpo) else loss

    logits = ref.logits(tokens[0])
    scale = []
    loss = step_loss(0, logits, scale)
    objective(loss).backward()
    B, T = tokens.shape[1], tokens.shape[2]
    check("logits", rel(step0["logits"].double(), logits.detach().reshape(B * T, -1)), TOLERANCES["logits"])
    check("loss", abs(float(step0["loss"][0]) - float(loss)) / (scale[0] if grpo else abs(float(loss))),
          TOLERANCES["loss"])
    # A tensor whose exact gradient is zero (the key bias: softmax ignores a
    # constant added to every score of a row) is compared on the scale of the
    # model's gradients rather than its own ~1e-20.
    if frozen:
        trainable_count = sum(p.numel() for n, p in ref.P.items() if n not in frozen)
        total_count = sum(p.numel() for p in ref.P.values())
        print(f"{label}: {len(frozen)} of {len(ref.P)} tensors frozen, "
              f"{100.0 * (1 - trainable_count / total_count):.1f}% of the elements")
        dumped = {k[len("grad."):] for k in step0 if k.startswith("grad.")}
        check("gradients dumped for frozen parameters (count)", len(dumped & frozen), 0)
        check("trainable parameters without a gradient (count)", len(set(ref.P) - frozen - dumped), 0)
    trained = {n: p for n, p in ref.P.items() if n not in frozen}
    floor = 1e-3 * max(float(p.grad.abs().max()) for p in trained.values())
    worst, worst_name = 0.0, ""
    for name, p in trained.items():
        e = float((step0["grad." + name].double() - p.grad).abs().max()) / max(float(p.grad.abs().max()), floor)
        if e > worst:
            worst, worst_name = e, name
    check(f"grads (worst: {worst_name})", worst, TOLERANCES["grad"])

    if dpo or grpo:
        # Each step at claw's own weights: the formula's loss and gradients.
        worst_loss, worst_grad, worst_name = 0.0, 0.0, ""
        saved = {n: p.detach().clone() for n, p in ref.P.items()}
        for s, d in enumerate(dpo_steps or grpo_steps):
            with torch.no_grad():
                for n, p in ref.P.items():
                    p.copy_(d["param." + n].double())
                    p.grad = None
            scale = []
            loss = step_loss(s, ref.logits(tokens[s]), scale)
            loss.backward()
            worst_loss = max(worst_loss, abs(float(d["loss"][0]) - float(loss)) / (scale[0] if grpo else abs(float(loss))))
            # A tensor whose exact gradient is zero (the key bias) on the model's scale, as above.
            floor = 1e-3 * max(float(p.grad.norm()) for p in trained.values())
            for n, p in trained.items():
                e = float((d["grad." + n].double() - p.grad).norm()) / max(float(p.grad.norm()), floor)
                if e > worst_grad:
                    worst_grad, worst_name = e, n
        with torch.no_grad():
            for n, p in ref.P.items():
                p.copy_(saved[n])
                p.grad = None
        what = "DPO" if dpo else "GRPO"
        check(f"{what} loss at claw's weights, each of {args.steps} steps", worst_loss, 1e-6)
        check(f"{what} gradients at claw's weights, relative L2 (worst: {worst_name})", worst_grad, 1e-5)

    # N AdamW steps on the reference, compared with claw's losses.
    ref.loads = {}  # the expert bias moves by the training steps' loads only
    no_decay = set(meta["no_decay"])
    params = list(trained.items())
    opt = torch.optim.AdamW(
        [{"params": [p for n, p in params if n not in no_decay], "weight_decay": adam["weight_decay"]},
         {"params": [p for n, p in params if n in no_decay], "weight_decay": 0.0}],
        lr=0.0, betas=(adam["beta1"], adam["beta2"]), eps=adam["eps"])
    worst_loss, worst_norm, worst_lr = 0.0, 0.0, 0.0
    for s in range(args.steps):
        opt.zero_grad()
        scale = []  # GRPO: its proximal log-probabilities are the reference's own at its weights
        loss = step_loss(s, ref.logits(tokens[s]), scale, own_proximal=True)
        objective(loss).backward()
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in params], adam["clip_grad"])
        lr = lr_at(s, 3e-3, 3e-4, 3, args.steps)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        ref.update_expert_bias()
        worst_loss = max(worst_loss, abs(claw["losses"][s] - float(loss)) / (scale[0] if grpo else abs(float(loss))))
        worst_norm = max(worst_norm, abs(claw["grad_norms"][s] - float(norm)) / float(norm))
        worst_lr = max(worst_lr, abs(claw["lrs"][s] - lr) / lr)
        print(f"{label} step {s + 1}: loss claw {claw['losses'][s]:.7f} torch {float(loss):.7f}  "
              f"grad norm claw {claw['grad_norms'][s]:.6f} torch {float(norm):.6f}")
    check(f"loss over {args.steps} AdamW steps", worst_loss, 1e-4 if dpo or grpo else TOLERANCES["step_loss"])
    check(f"grad norm over {args.steps} steps", worst_norm, TOLERANCES["grad_norm"])
    check("learning rate schedule", worst_lr, 1e-12)
    if ref.buffers:  # the MoE expert biases after the steps' updates: the same loads, so the same signs
        worst = max(float((final[n].double() - b).abs().max()) for n, b in ref.buffers.items())
        moved = max(float((b - init[n].double()).abs().max()) for n, b in ref.buffers.items())
        check(f"expert biases after {args.steps} steps (moved by up to {moved:.0e})", worst, 1e-7)
    if frozen:
        changed = [n for n in frozen if not torch.equal(final[n], init[n])]
        check(f"frozen parameters changed (count; first: {changed[:1]})", len(changed), 0)
        worst, worst_name = 0.0, ""
        for name, p in trained.items():
            update = float((p.detach() - init[name].double()).abs().max())
            e = float((final[name].double() - p.detach()).abs().max()) / max(update, 1e-30)
            if e > worst:
                worst, worst_name = e, name
        check(f"final trainable parameters after {args.steps} steps (worst: {worst_name})", worst,
              TOLERANCES["final_param"])
    if failures:
        print(f"{label}: FAILED: {', '.join(failures)}")
        sys.exit(1)
    print(f"{label}: claw matches the PyTorch reference")


if __name__ == "__main__":
    main()
