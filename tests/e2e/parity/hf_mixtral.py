"""MixtralForCausalLM interchange against `transformers` itself (run with
tools/hf_env.sh's venv: transformers 4.49 over Debian's torch).

    hf_mixtral.py make HF_DIR                  a random MixtralForCausalLM made by
                                               transformers (4 experts, top 2; norms
                                               and router perturbed), save_pretrained
    hf_mixtral.py logits HF_DIR LOGITS_FILE    transformers' logits of HF_DIR on the
                                               tokens of a `claw eval --logits-file`
                                               file equal claw's (1e-4 x max |logit|)
    hf_mixtral.py same HF_DIR_A HF_DIR_B       the same tensors, bit for bit (names,
                                               shapes, dtypes), and the same config
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import MixtralConfig, MixtralForCausalLM


def cmd_make(out):
    torch.manual_seed(11)
    cfg = MixtralConfig(vocab_size=50257, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                        rope_theta=1e6, rms_norm_eps=1e-5, num_local_experts=4, num_experts_per_tok=2,
                        router_aux_loss_coef=0.02, sliding_window=None, tie_word_embeddings=False,
                        torch_dtype="float32")
    model = MixtralForCausalLM(cfg).eval()
    with torch.no_grad():  # a misplaced norm or router shows only if they are not the defaults
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            if name.endswith("block_sparse_moe.gate.weight"):
                p.normal_(0, 0.5)
    model.save_pretrained(out, safe_serialization=True)
    n = len(load_file(os.path.join(out, "model.safetensors")))
    print(f"made {out}: MixtralForCausalLM by transformers, {n} tensors")


def cmd_logits(hf_dir, logits_file):
    model = MixtralForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    got = load_file(logits_file)
    tokens = got["tokens"].long()
    with torch.no_grad():
        ref = model(tokens).logits.double()
    claw = got["logits"].double()
    assert claw.shape == ref.shape, f"claw's logits {tuple(claw.shape)}, transformers' {tuple(ref.shape)}"
    diff = (claw - ref).abs().max().item()
    tol = 1e-4 * max(1.0, ref.abs().max().item())
    print(f"MixtralForCausalLM {hf_dir}: max |claw - transformers| = {diff:.2e} over {tuple(ref.shape)} logits "
          f"(tolerance {tol:.1e})")
    assert diff <= tol, "logits differ"


def cmd_same(a, b):
    pa, pb = load_file(os.path.join(a, "model.safetensors")), load_file(os.path.join(b, "model.safetensors"))
    assert sorted(pa) == sorted(pb), f"tensor names differ: {sorted(set(pa) ^ set(pb))[:5]}"
    bad = [k for k in pa if pa[k].dtype != pb[k].dtype or pa[k].shape != pb[k].shape or not torch.equal(pa[k], pb[k])]
    assert not bad, f"{len(bad)} tensors differ, e.g. {bad[:3]}"
    ca, cb = (json.load(open(os.path.join(d, "config.json"))) for d in (a, b))
    keys = ["architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta",
            "num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "tie_word_embeddings"]
    diff = [(k, ca.get(k), cb.get(k)) for k in keys if ca.get(k) != cb.get(k)]
    assert not diff, f"config fields differ: {diff}"
    print(f"same: {a} and {b}: {len(pa)} tensors bitwise equal, config agrees")


if __name__ == "__main__":
    {"make": cmd_make, "logits": cmd_logits, "same": cmd_same}[sys.argv[1]](*sys.argv[2:])
