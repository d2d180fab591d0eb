"""claw's LoRA adapters against PyPI `peft` (with transformers and torch, from
tools/hf_env.sh's venv), for peft_interchange.sh.

    peft_check.py compare FAMILY HF_BASE ADAPTER LOGITS GRADS [ADAPTER LOGITS GRADS ...] [--same A B]
        for each adapter, PeftModel.from_pretrained(HF_BASE, ADAPTER): its
        logits on the tokens of `claw eval --logits-file` equal claw's (1e-5
        of their scale), and its loss and adapter gradients on the batch of
        `claw eval --grads-file` equal claw's (loss 1e-6, gradients 1e-5
        relative per tensor); --same: adapters A and B hold the same tensors
        bit for bit (one process for all: torch's start-up once)
    peft_check.py make FAMILY HF_BASE ADAPTER
        an adapter made by PEFT itself (get_peft_model with random A and B,
        save_pretrained): GPT-2 on c_attn, attention's c_proj and c_fc;
        Llama on q_proj, v_proj and down_proj with rsLoRA; Phi-3 on its fused
        qkv_proj and gate_up_proj; DeepSeek-V3 on q_a_proj, kv_b_proj, o_proj
        and down_proj with rsLoRA; Qwen3-MoE on q_proj, v_proj and down_proj
        (the dense layer's and every expert's) with rsLoRA

claw's names map to PEFT's here independently of claw's exporter: GPT-2's
q, k and v share the A of the fused c_attn and hold row blocks of its B;
Phi-3's the same of qkv_proj, and its gate and up of gate_up_proj.
"""
import json
import re
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

torch.manual_seed(0)


def peft_name(family, claw, cfg):
    """PEFT's tensor (without the base_model.model. prefix) and row slice for a claw LoRA tensor."""
    m = re.fullmatch(r"layers\.(\d+)\.(attention|mlp)\.(\w+)\.(lora_[AB])\.weight", claw)
    assert m, claw
    layer, block, part, factor = m.groups()
    hidden = cfg.get("n_embd", cfg.get("hidden_size"))
    if family == "phi3":  # qkv_proj rows [q | k | v], gate_up_proj rows [gate | up]
        heads = cfg["num_attention_heads"]
        q, kv, f = hidden, hidden // heads * cfg["num_key_value_heads"], cfg["intermediate_size"]
        fused = {"linear_qkv": ("self_attn.qkv_proj", None), "q_proj": ("self_attn.qkv_proj", slice(0, q)),
                 "k_proj": ("self_attn.qkv_proj", slice(q, q + kv)),
                 "v_proj": ("self_attn.qkv_proj", slice(q + kv, q + 2 * kv)), "o_proj": ("self_attn.o_proj", None),
                 "linear_fc1": ("mlp.gate_up_proj", None), "gate_proj": ("mlp.gate_up_proj", slice(0, f)),
                 "up_proj": ("mlp.gate_up_proj", slice(f, 2 * f)), "down_proj": ("mlp.down_proj", None)}
        module, rows = fused[part]
        return f"model.layers.{layer}.{module}.{factor}.weight", rows
    if family in ("llama", "deepseek", "moe"):  # DeepSeek-V3's latent attention: claw's kv_a_proj is kv_a_proj_with_mqa
        where = "self_attn" if block == "attention" else "mlp"
        part = "kv_a_proj_with_mqa" if part == "kv_a_proj" else part
        return f"model.layers.{layer}.{where}.{part}.{factor}.weight", None
    h = f"transformer.h.{layer}"
    if part == "linear_qkv":
        return f"{h}.attn.c_attn.{factor}.weight", None
    if part in ("q_proj", "k_proj", "v_proj"):
        i = "qkv".index(part[0])
        return f"{h}.attn.c_attn.{factor}.weight", slice(i * hidden, (i + 1) * hidden)
    module = {"o_proj": "attn.c_proj", "fc": "mlp.c_fc", "proj": "mlp.c_proj"}[part]
    return f"{h}.{module}.{factor}.weight", None


def peft_targets(family, claw, grad, cfg):
    """(PEFT tensor, row slice, claw's part of the gradient) for a claw LoRA gradient; a layer's stacked
    experts' adapters ([E, ...]) are one PEFT tensor per expert."""
    m = re.fullmatch(r"layers\.(\d+)\.mlp\.experts\.(\w+)\.(lora_[AB])\.weight", claw)
    if m:
        layer, part, factor = m.groups()
        return [(f"model.layers.{layer}.mlp.experts.{e}.{part}.{factor}.weight", None, grad[e])
                for e in range(grad.shape[0])]
    target, rows = peft_name(family, claw, cfg)
    return [(target, rows, grad)]


def load_peft(hf_base, adapter):
    base = AutoModelForCausalLM.from_pretrained(hf_base, torch_dtype=torch.float32, attn_implementation="eager")
    model = PeftModel.from_pretrained(base, adapter, is_trainable=True)
    model.eval()  # no dropout; claw's adapters here have none either
    return model


def compare(family, hf_base, adapter, logits_file, grads_file):
    model = load_peft(hf_base, adapter)
    cfg = json.load(open(f"{hf_base}/config.json"))

    lf = load_file(logits_file)
    with torch.no_grad():
        got = model(input_ids=lf["tokens"].long()).logits
    want = lf["logits"]
    scale = want.abs().max().item()
    err = (got - want).abs().max().item()
    print(f"logits: max |PEFT - claw| {err:.3g} (scale {scale:.3g})")
    assert err <= 1e-5 * max(1.0, scale), f"logits differ by {err} (scale {scale})"

    gf = load_file(grads_file)
    tokens, targets = gf["tokens"].long(), gf["targets"].long()
    model.zero_grad()
    logits = model(input_ids=tokens).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), targets.reshape(-1),
                                             ignore_index=-1)
    loss.backward()
    claw_loss = gf["loss"].item()
    print(f"loss: PEFT {loss.item():.8f}, claw {claw_loss:.8f}")
    assert abs(loss.item() - claw_loss) <= 1e-6 * abs(claw_loss), "losses differ"

    grads = {n.replace("base_model.model.", "", 1).replace(".default", ""): p.grad
             for n, p in model.named_parameters() if p.requires_grad}
    covered = {n: torch.zeros_like(g, dtype=torch.bool) for n, g in grads.items()}
    worst = 0.0
    for name, g_all in gf.items():
        if not name.startswith("grad."):
            continue
        for target, rows, g_claw in peft_targets(family, name[len("grad."):], g_all, cfg):
            assert target in grads, f"claw's {name} has no PEFT parameter {target}; PEFT has {sorted(grads)[:4]}..."
            g_peft = grads[target] if rows is None else grads[target][rows]
            assert g_peft.shape == g_claw.shape, f"{name}: claw {tuple(g_claw.shape)}, PEFT {tuple(g_peft.shape)}"
            rel = ((g_peft - g_claw).abs().max() / g_peft.abs().max().clamp_min(1e-30)).item()
            worst = max(worst, rel)
            assert rel <= 1e-5, f"{name} ({target}): gradients differ by {rel:.3g} of their scale"
            (covered[target] if rows is None else covered[target][rows]).fill_(True)
    missing = [n for n, c in covered.items() if not c.all()]
    assert not missing, f"PEFT trains {missing} which claw's gradients do not cover"
    print(f"gradients: {len(grads)} PEFT adapter tensors, worst relative difference {worst:.3g}")


def make(family, hf_base, adapter):
    base = AutoModelForCausalLM.from_pretrained(hf_base, torch_dtype=torch.float32)
    if family == "gpt2":
        config = LoraConfig(r=4, lora_alpha=16, target_modules=["c_attn", "attn.c_proj", "c_fc"], fan_in_fan_out=True,
                            init_lora_weights=False, task_type="CAUSAL_LM")
    elif family == "deepseek":  # the latent attention's modules and the MLP's down projection
        config = LoraConfig(r=8, lora_alpha=4, target_modules=["q_a_proj", "kv_b_proj", "o_proj", "down_proj"],
                            use_rslora=True, init_lora_weights=False, task_type="CAUSAL_LM")
    elif family == "moe":  # down_proj: the dense layer's and every expert's
        config = LoraConfig(r=8, lora_alpha=4, target_modules=["q_proj", "v_proj", "down_proj"], use_rslora=True,
                            init_lora_weights=False, task_type="CAUSAL_LM")
    elif family == "phi3":  # the fused modules
        config = LoraConfig(r=8, lora_alpha=4, target_modules=["qkv_proj", "gate_up_proj"], use_rslora=True,
                            init_lora_weights=False, task_type="CAUSAL_LM")
    else:
        config = LoraConfig(r=8, lora_alpha=4, target_modules=["q_proj", "v_proj", "down_proj"], use_rslora=True,
                            init_lora_weights=False, task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    with torch.no_grad():  # B random too (init_lora_weights=False already), at a scale that moves the logits
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.05)
    model.save_pretrained(adapter)
    print(f"PEFT adapter: {sum(p.numel() for n, p in model.named_parameters() if 'lora_' in n)} parameters in "
          f"{adapter}")


def same(a_dir, b_dir):
    a, b = (load_file(f"{d}/adapter_model.safetensors") for d in (a_dir, b_dir))
    assert sorted(a) == sorted(b), (sorted(a)[:3], sorted(b)[:3])
    assert all(a[k].shape == b[k].shape and bool((a[k] == b[k]).all()) for k in a), "tensors differ"
    print(f"import then export: {len(a)} tensors bit for bit")


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "compare":
        pair = []
        if "--same" in args:
            at = args.index("--same")
            pair, args = args[at + 1:at + 3], args[:at]
        family, hf_base, runs = args[0], args[1], args[2:]
        labels = ["claw's adapter in PEFT", "PEFT's adapter in claw"]  # peft_interchange.sh's order
        for i in range(0, len(runs), 3):
            print(f"{labels[i // 3] if i // 3 < len(labels) else runs[i]}:")
            compare(family, hf_base, *runs[i:i + 3])
        if pair:
            same(*pair)
    elif mode == "make":  # FAMILY HF_BASE ADAPTER [FAMILY2 ADAPTER2 ...]: each over the one base
        make(args[0], args[1], args[2])
        for i in range(3, len(args), 2):
            make(args[i], args[1], args[i + 1])
    else:
        sys.exit(f"unknown mode {mode}")
