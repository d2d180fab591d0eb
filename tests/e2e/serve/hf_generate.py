"""Greedy generation by Hugging Face `transformers` (the oracle of
tests/e2e/serve/hf_generate.sh).

    hf_generate.py make gpt2|llama DIR   a random model, as save_pretrained writes it
    hf_generate.py generate DIR N IDS    N greedy tokens after the comma-separated prompt
                                         IDS with model.generate(); prints JSON: the tokens
                                         and, at each step, the gap between the best and
                                         second-best logit (a test on near-ties proves nothing)

Weights are drawn wider than the default initialiser (std 0.3) so that the
greedy choice is decided by clear margins, not by the last bits of a sum.
"""
import json
import sys

import torch
import transformers as tf
import transformers.generation.utils as gen_utils

# Debian's torch 1.13 cannot import torch.distributed.fsdp under Python 3.11
# (a dataclass error), and generate() imports it only to ask whether the
# model is FSDP-wrapped; it is not.
gen_utils.is_fsdp_managed_module = lambda module: False


def make(family, out):
    torch.manual_seed(0)
    if family == "gpt2":
        cfg = tf.GPT2Config(vocab_size=1000, n_positions=256, n_embd=64, n_layer=2, n_head=4,
                            initializer_range=0.3, bos_token_id=0, eos_token_id=0)
        model = tf.GPT2LMHeadModel(cfg)
    else:
        cfg = tf.LlamaConfig(vocab_size=1000, max_position_embeddings=256, hidden_size=64, intermediate_size=160,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             initializer_range=0.3, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                             bos_token_id=1, eos_token_id=2)
        model = tf.LlamaForCausalLM(cfg)
    model.save_pretrained(out, safe_serialization=True)


def generate(d, n, ids):
    model = tf.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    prompt = torch.tensor([[int(x) for x in ids.split(",")]])
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, output_scores=True, return_dict_in_generate=True,
                             pad_token_id=model.config.eos_token_id)
    gaps = []
    for s in out.scores:
        top = torch.topk(s[0], 2).values
        gaps.append(float(top[0] - top[1]))
    print(json.dumps({"tokens": out.sequences[0, prompt.shape[1]:].tolist(), "gaps": gaps}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    else:
        generate(sys.argv[2], int(sys.argv[3]), sys.argv[4])
