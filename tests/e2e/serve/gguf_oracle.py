"""GGUF files written by `claw ckpt export --format gguf`, read by others
(the oracle of tests/e2e/serve/gguf_oracle.sh):

    gguf_oracle.py check HF_DIR TYPE FILE   llama.cpp's `gguf` reader lists the tensors and their
                                            types; transformers' GGUF loader (which dequantizes
                                            with `gguf` and undoes llama.cpp's q/k row order)
                                            rebuilds the model: its config equals HF_DIR's and every
                                            tensor equals HF_DIR's within TYPE's rounding
    gguf_oracle.py generate FILE N IDS      N greedy tokens from the model transformers rebuilds
                                            from FILE, as JSON (hf_generate.py's format)
"""
import json
import sys

import gguf
import numpy as np
import torch
import transformers as tf
import transformers.generation.utils as gen_utils
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

gen_utils.is_fsdp_managed_module = lambda module: False  # see hf_generate.py


def rebuild(path):
    # from_pretrained(gguf_file=...) needs torch 2 (a meta-device context);
    # the loader underneath works on torch 1.13.
    cfg = dict(load_gguf_checkpoint(path, return_tensors=False)["config"])
    # transformers takes GPT-2's vocabulary size from the tokenizer (these
    # random models have none) and maps gpt2.context_length to n_ctx only:
    # both come from the file itself here.
    reader = gguf.GGUFReader(path)
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    cfg["vocab_size"] = int(embd.shape[1])
    if cfg["model_type"] == "gpt2":
        cfg["n_positions"] = int(reader.fields["gpt2.context_length"].parts[-1][0])
    config = tf.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    model = tf.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)["tensors"]
    result = model.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in tensors.items()}, strict=False)
    # GPT-2's lm_head is tied to the embeddings (GGUF's output.weight is a copy).
    assert not result.unexpected_keys and set(result.missing_keys) <= {"lm_head.weight"}, result
    return model.eval()


# Largest |error| / largest |value| of a block that each type's rounding allows.
BOUND = {"f32": 0.0, "bf16": 2**-8, "f16": 2**-11 + 1e-5, "q8_0": 0.5 / 127 * 1.01 + 1e-3, "q4_0": 1 / 8 * 1.01 + 1e-3}
GGML = {"f32": "F32", "bf16": "BF16", "f16": "F16", "q8_0": "Q8_0", "q4_0": "Q4_0"}


def check(hf_dir, wtype, path):
    reader = gguf.GGUFReader(path)
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    matrices = [n for n in types if n.endswith(".weight") and "norm" not in n and n != "position_embd.weight"]
    assert matrices and all(types[n] == GGML[wtype] for n in matrices), (wtype, types)
    assert all(types[n] == "F32" for n in types if n not in matrices), types

    ref = tf.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    model = rebuild(path)
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"):
        assert getattr(model.config, key) == getattr(ref.config, key), (key, model.config, ref.config)
    got, want = model.state_dict(), ref.state_dict()
    worst = 0.0
    for name, w in want.items():
        if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
            continue  # GPT-2's causal-mask buffers
        g = got[name]
        assert g.shape == w.shape, (name, g.shape, w.shape)
        rel = float((g - w).abs().max()) / max(float(w.abs().max()), 1e-12)
        worst = max(worst, rel)
        assert rel <= BOUND[wtype], f"{name}: error {rel:.3g} of its largest value, {wtype} allows {BOUND[wtype]:.3g}"
    print(f"{path}: {arch}, {len(types)} tensors ({len(matrices)} {GGML[wtype]}); transformers rebuilds "
          f"the model within {wtype}'s rounding (worst {worst:.2e} of a tensor's largest value)")


def generate(path, n, ids):
    model = rebuild(path)
    prompt = torch.tensor([[int(x) for x in ids.split(",")]])
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, output_scores=True, return_dict_in_generate=True,
                             pad_token_id=0)
    gaps = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores]
    print(json.dumps({"tokens": out.sequences[0, prompt.shape[1]:].tolist(), "gaps": gaps}))


if __name__ == "__main__":
    if sys.argv[1] == "check":
        check(*sys.argv[2:5])
    elif sys.argv[1] == "generate":
        generate(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(__doc__)
