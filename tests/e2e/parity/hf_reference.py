"""Hugging Face checkpoints without `transformers`: GPT2LMHeadModel and
LlamaForCausalLM written from their published definitions with their tensor
names (Debian's python3-torch), for claw's export/import tests.

    hf_reference.py logits HF_DIR LOGITS_FILE   HF_DIR's logits on the tokens of a
                                                `claw eval --logits-file` file equal claw's
    hf_reference.py make FAMILY HF_DIR          a random model (gpt2 | llama: the
                                                gpt2-tiny / llama-tiny shapes) as
                                                save_pretrained writes it
    hf_reference.py same HF_DIR_A HF_DIR_B      the same tensors, bit for bit, and config

The conventions that matter: GPT-2's Conv1D computes x @ W + b with W stored
[in, out], c_attn packs q | k | v along its output, GELU is the tanh form
(gelu_new), and the LM head is tied to wte; Llama's projections are
nn.Linear (x @ W^T), RoPE rotates halves (rotate_half), K/V heads repeat for
grouped-query attention and RMSNorm is w * x / sqrt(mean(x^2) + eps).
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

DT = {"F32": np.float32, "I32": np.int32, "F64": np.float64}


def read_st(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, v in header.items():
        b, e = v["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e], dtype=DT[v["dtype"]]).reshape(v["shape"]).copy()
    return out, meta


def write_st(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype=np.float32)
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_hf(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    sd = {}
    for f in files:
        t, meta = read_st(os.path.join(d, f))
        assert meta.get("format") == "pt", f"{d}/{f}: metadata format {meta.get('format')!r}, transformers wants 'pt'"
        sd.update(t)
    return cfg, {k: torch.from_numpy(v).double() for k, v in sd.items()}


def gpt2_logits(c, P, tokens):
    B, T = tokens.shape
    C, H = c["n_embd"], c["n_head"]
    D = C // H
    eps = c["layer_norm_epsilon"]
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), P[p + ".weight"], P[p + ".bias"], eps)
    conv1d = lambda x, p: x @ P[p + ".weight"] + P[p + ".bias"]
    gelu = lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    x = P["transformer.wte.weight"][tokens] + P["transformer.wpe.weight"][torch.arange(T)]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(c["n_layer"]):
        p = f"transformer.h.{l}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(C, dim=-1)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + conv1d((att @ v).transpose(1, 2).reshape(B, T, C), p + "attn.c_proj")
        x = x + conv1d(gelu(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    head = P.get("lm_head.weight", P["transformer.wte.weight"])  # tied unless saved
    return ln(x, "transformer.ln_f") @ head.T


def llama_logits(c, P, tokens):
    B, T = tokens.shape
    C, H = c["hidden_size"], c["num_attention_heads"]
    G = c.get("num_key_value_heads") or H
    D = c.get("head_dim") or C // H
    eps, theta = c["rms_norm_eps"], c.get("rope_theta", 10000.0)
    rms = lambda x, p: P[p + ".weight"] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    lin = lambda x, p: x @ P[p + ".weight"].T
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    rot = lambda t: torch.cat([-t[..., D // 2:], t[..., :D // 2]], -1)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = P["model.embed_tokens.weight"][tokens]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, p + "input_layernorm")
        q = lin(h, p + "self_attn.q_proj").view(B, T, H, D).transpose(1, 2)
        k = lin(h, p + "self_attn.k_proj").view(B, T, G, D).transpose(1, 2)
        v = lin(h, p + "self_attn.v_proj").view(B, T, G, D).transpose(1, 2)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
        att = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + lin((att @ v).transpose(1, 2).reshape(B, T, H * D), p + "self_attn.o_proj")
        h = rms(x, p + "post_attention_layernorm")
        silu = torch.nn.functional.silu(lin(h, p + "mlp.gate_proj"))
        x = x + lin(silu * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    head = P["lm_head.weight"] if "lm_head.weight" in P else P["model.embed_tokens.weight"]
    return rms(x, "model.norm") @ head.T


def cmd_logits(hf_dir, logits_file):
    cfg, P = read_hf(hf_dir)
    got, _ = read_st(logits_file)
    tokens = torch.from_numpy(got["tokens"]).long()
    with torch.no_grad():
        ref = (gpt2_logits if cfg["model_type"] == "gpt2" else llama_logits)(cfg, P, tokens)
    claw = torch.from_numpy(got["logits"]).double()
    assert claw.shape == ref.shape, f"claw's logits {tuple(claw.shape)}, reference {tuple(ref.shape)}"
    diff = (claw - ref).abs().max().item()
    tol = 1e-4 * max(1.0, ref.abs().max().item())
    print(f"{cfg['architectures'][0]} {hf_dir}: max |claw - reference| = {diff:.2e} over {tuple(ref.shape)} "
          f"logits (tolerance {tol:.1e})")
    assert diff <= tol, "logits differ"


def cmd_make(family, out):
    g = torch.Generator().manual_seed(7)
    r = lambda *s: (torch.randn(*s, generator=g) * 0.05).numpy()
    if family == "gpt2":
        C, L, V, F, N = 256, 4, 50257, 1024, 1024
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": N,
               "n_embd": C, "n_layer": L, "n_head": 4, "n_inner": None, "activation_function": "gelu_new",
               "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
        sd = {"transformer.wte.weight": r(V, C), "transformer.wpe.weight": r(N, C),
              "transformer.ln_f.weight": 1 + r(C), "transformer.ln_f.bias": r(C)}
        for l in range(L):
            p = f"transformer.h.{l}."
            for n, (i, o) in {"attn.c_attn": (C, 3 * C), "attn.c_proj": (C, C), "mlp.c_fc": (C, F),
                              "mlp.c_proj": (F, C)}.items():
                sd[p + n + ".weight"], sd[p + n + ".bias"] = r(i, o), r(o)
            for n in ("ln_1", "ln_2"):
                sd[p + n + ".weight"], sd[p + n + ".bias"] = 1 + r(C), r(C)
    else:
        C, L, V, F, H, G = 256, 4, 50257, 768, 8, 2
        D = C // H
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": C,
               "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": G,
               "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
               "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}
        sd = {"model.embed_tokens.weight": r(V, C), "lm_head.weight": r(V, C), "model.norm.weight": 1 + r(C)}
        for l in range(L):
            p = f"model.layers.{l}."
            for n, (o, i) in {"self_attn.q_proj": (H * D, C), "self_attn.k_proj": (G * D, C),
                              "self_attn.v_proj": (G * D, C), "self_attn.o_proj": (C, H * D),
                              "mlp.gate_proj": (F, C), "mlp.up_proj": (F, C), "mlp.down_proj": (C, F)}.items():
                sd[p + n + ".weight"] = r(o, i)
            sd[p + "input_layernorm.weight"], sd[p + "post_attention_layernorm.weight"] = 1 + r(C), 1 + r(C)
    os.makedirs(out, exist_ok=True)
    write_st(os.path.join(out, "model.safetensors"), sd)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    print(f"made {out}: {cfg['architectures'][0]}, {len(sd)} tensors")


def cmd_same(a, b):
    ca, pa = read_hf(a)
    cb, pb = read_hf(b)
    assert sorted(pa) == sorted(pb), f"tensor names differ: {sorted(set(pa) ^ set(pb))[:5]}"
    bad = [k for k in pa if pa[k].shape != pb[k].shape or not torch.equal(pa[k], pb[k])]
    assert not bad, f"{len(bad)} tensors differ, e.g. {bad[:3]}"
    keys = [k for k in ca if k in cb and ca[k] != cb[k] and ca[k] is not None]
    assert not keys, f"config fields differ: {[(k, ca[k], cb[k]) for k in keys]}"
    print(f"same: {a} and {b}: {len(pa)} tensors bitwise equal, config agrees")


if __name__ == "__main__":
    {"logits": cmd_logits, "make": cmd_make, "same": cmd_same}[sys.argv[1]](*sys.argv[2:])
