"""claw's MoE kernels against PyTorch (float64), written from the formulas.

For each case, runs moe_dump (tests/e2e/parity/moe_dump.cc), which writes its
seeded inputs and claw's results, then recomputes everything here with
autograd:
  router     logits = x Wr^T; softmax: the top k logits (+ expert bias),
             weights softmax over those k; sigmoid: s = sigmoid(logits),
             top k of s (+ bias), weights s / their sum (k > 1); grouped
             (DeepSeek-V3): experts in G groups, each group scored by the sum
             of its two largest keys (logits or s, + bias), all but the best
             g groups masked to -inf before the top k; weights times the
             scaling factor
  capacity   ceil(N k / E x factor) tokens per expert, kept by largest
             weight (probs) or first in token order (position)
  experts    SwiGLU FFN per expert, y_t = sum of kept choices' weight x FFN(x_t)
  aux        coeff E sum_i f_i P_i, f_i = share of the top-k choices (aux
             scores, no bias, no capacity), P_i = mean aux score
             (softmax over E; sigmoid: s / sum_E s)
  z-loss     coeff mean_t logsumexp(logits_t)^2
  bias       bias + rate sign(mean load - load) after the step
L = <y, dy> + aux + z; checks the choices, kept mask and weights, y, both
losses and the gradients of L with respect to x and every weight (1e-6 of
each tensor's largest magnitude).

    /usr/bin/python3 tests/e2e/parity/moe_reference.py --dump-tool build/bin/moe_dump
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32}


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e], DTYPES[h["dtype"]]).reshape(h["shape"])
    return out, meta


def reference(t, cfg):
    f64 = lambda a: torch.tensor(np.array(a, dtype=np.float64), requires_grad=True)
    x, wr, wg, wu, wd = (f64(t[k]) for k in ("x", "router", "gate", "up", "down"))
    dy = torch.tensor(t["dy"].astype(np.float64))
    N, E, k = x.shape[0], wr.shape[0], cfg["topk"]
    bias = torch.tensor(t["bias"].astype(np.float64)) if "bias" in t else torch.zeros(E, dtype=torch.float64)
    logits = x @ wr.T
    G, g = cfg.get("groups", 0), cfg.get("group_topk", 0)

    moved = []  # tokens whose grouped choice is not the plain top k (the groups must matter)

    def choose(keys):  # DeepSeek-V3's gate: the best g groups by their top-2 sums, then the top k in them
        if G > 1:
            plain = torch.topk(keys, k, dim=-1).indices.sort(-1).values
            group_scores = keys.view(N, G, -1).topk(2, dim=-1).values.sum(-1)
            best = group_scores.topk(g, dim=-1).indices
            masked = torch.ones(N, G, dtype=torch.bool).scatter_(1, best, False)
            keys = keys.view(N, G, -1).masked_fill(masked.unsqueeze(-1), float("-inf")).view(N, E)
            idx = torch.topk(keys, k, dim=-1).indices
            moved.append(int((idx.sort(-1).values != plain).any(-1).sum()))
            return idx
        return torch.topk(keys, k, dim=-1).indices

    if cfg["score"] == "softmax":
        idx = choose(logits.detach() + bias)
        probs = torch.softmax(torch.gather(logits, 1, idx), dim=-1)
        aux_scores = torch.softmax(logits, dim=-1)
    else:
        s = torch.sigmoid(logits)
        idx = choose(s.detach() + bias)
        chosen = torch.gather(s, 1, idx)
        probs = chosen / (chosen.sum(-1, keepdim=True) + 1e-20) if k > 1 else chosen
        aux_scores = s / (s.sum(-1, keepdim=True) + 1e-20)
    probs = probs * cfg.get("scaling", 1.0)
    # Capacity: per expert, its (token, choice) pairs in the policy's order.
    kept = torch.ones(N, k, dtype=torch.float64)
    if cfg["capacity"] > 0:
        cap = math.ceil(N * k / E * cfg["capacity"])
        for e in range(E):
            pairs = [(tt, j) for tt in range(N) for j in range(k) if idx[tt, j] == e]
            if cfg["drop"] == "probs":
                pairs.sort(key=lambda p: -probs[p].item())  # stable: ties keep token order
            for p in pairs[cap:]:
                kept[p] = 0
    w = probs * kept
    y = torch.zeros_like(x)
    for tt in range(N):
        for j in range(k):
            if kept[tt, j]:
                e = idx[tt, j]
                h = torch.nn.functional.silu(wg[e] @ x[tt]) * (wu[e] @ x[tt])
                y[tt] = y[tt] + w[tt, j] * (wd[e] @ h)
    routed = torch.zeros(E, dtype=torch.float64)
    for e in torch.topk(aux_scores.detach(), k, dim=-1).indices.flatten():
        routed[e] += 1
    aux = cfg["aux_coeff"] * E * torch.sum(routed / (N * k) * aux_scores.mean(0))
    z = cfg["z_coeff"] * torch.mean(torch.logsumexp(logits, dim=-1) ** 2)
    L = (y * dy).sum() + aux + z
    L.backward()
    load = torch.zeros(E, dtype=torch.float64)
    for tt in range(N):
        for j in range(k):
            if kept[tt, j]:
                load[idx[tt, j]] += 1
    bias_next = bias + cfg["bias_rate"] * torch.sign(load.mean() - load)
    return {"expert": idx.numpy(), "kept": kept.numpy(), "prob": w.detach().numpy(), "y": y.detach().numpy(),
            "losses": np.array([aux.item(), z.item()]), "grad.x": x.grad.numpy(), "grad.router": wr.grad.numpy(),
            "grad.gate": wg.grad.numpy(), "grad.up": wu.grad.numpy(), "grad.down": wd.grad.numpy(),
            "bias_next": bias_next.numpy(), "moved": moved[0] if moved else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dump-tool", required=True)
    a = ap.parse_args()
    cases = [
        ("softmax top-2 dropless", ["--score", "softmax", "--topk", "2"]),
        ("softmax top-1", ["--score", "softmax", "--topk", "1"]),
        ("softmax top-2, capacity 1.0 by probs", ["--score", "softmax", "--topk", "2", "--capacity", "1.0"]),
        ("softmax top-2, capacity 0.5 by position", ["--score", "softmax", "--topk", "2", "--capacity", "0.5",
                                                     "--drop", "position"]),
        ("sigmoid top-2 with expert bias", ["--score", "sigmoid", "--topk", "2", "--bias"]),
        ("sigmoid top-3, bias, capacity 1.25", ["--score", "sigmoid", "--topk", "3", "--bias", "--capacity", "1.25"]),
        ("sigmoid top-1, no aux, no z", ["--score", "sigmoid", "--topk", "1", "--aux", "0", "--z", "0"]),
        ("DeepSeek-V3: sigmoid top-4 of 16 in 4 groups (2 kept), bias, scaling 2.5",
         ["--score", "sigmoid", "--topk", "4", "--experts", "16", "--groups", "4", "--group-topk", "2", "--bias",
          "--scaling", "2.5"]),
        ("softmax top-2 of 12 in 3 groups (1 kept), capacity 1.0 by probs, scaling 0.5",
         ["--score", "softmax", "--topk", "2", "--experts", "12", "--groups", "3", "--group-topk", "1",
          "--capacity", "1.0", "--scaling", "0.5"]),
    ]
    worst_all = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in cases:
            path = os.path.join(tmp, "moe.safetensors")
            subprocess.run([a.dump_tool, "--out", path] + flags, check=True)
            t, meta = read_safetensors(path)
            cfg = json.loads(meta["config"])
            ref = reference(t, cfg)
            assert np.array_equal(t["expert"], ref["expert"]), f"{name}: experts chosen differ"
            assert np.array_equal(t["kept"], ref["kept"]), f"{name}: kept choices differ"
            worst = 0.0
            for key in ("prob", "y", "losses", "grad.x", "grad.router", "grad.gate", "grad.up", "grad.down") + \
                    (("bias_next",) if "bias" in t else ()):
                got, want = t[key].astype(np.float64), ref[key]
                scale = max(np.abs(want).max(), 1e-30)
                err = np.abs(got - want).max() / scale
                worst = max(worst, err)
                assert err <= 1e-6, f"{name}: {key} differs by {err:.2e} of its largest value"
            dropped = int((t["kept"] == 0).sum())
            moved = ""
            if ref["moved"] is not None:
                assert ref["moved"] > 0, f"{name}: the groups chose every token's plain top k (a case that tests nothing)"
                moved = f", {ref['moved']} of {t['x'].shape[0]} tokens routed off their plain top k by the groups"
            print(f"ok {name}: {dropped} choices dropped{moved}, worst {worst:.1e} (aux {t['losses'][0]:.6f}, "
                  f"z {t['losses'][1]:.6f})")
            worst_all = max(worst_all, worst)
    print(f"ok: {len(cases)} MoE cases equal the PyTorch formulas (worst {worst_all:.1e} of each tensor's largest value)")


if __name__ == "__main__":
    sys.exit(main())
