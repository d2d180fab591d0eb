"""A model family of `transformers` against claw. The oracle of hf_family.sh,
run with tools/hf_env.sh's venv (transformers 4.49 over Debian's torch), or
for the families that transformers 4.49 lacks (Qwen 3) with
tools/torch2_env.sh's (transformers 4.57 over PyPI's torch 2.5).

    hf_family.py make FAMILY HF_DIR              a random FAMILY model made by transformers,
                                                 save_pretrained (qwen2: Qwen2ForCausalLM,
                                                 biases on q, k, v; qwen3: Qwen3ForCausalLM,
                                                 RMSNorm on each head's q and k, heads of 32
                                                 on a width of 64 with 4 heads; qwen3moe:
                                                 Qwen3MoeForCausalLM, 8 experts top 2, layer 0
                                                 dense; phi3:
                                                 Phi3ForCausalLM, fused qkv_proj and
                                                 gate_up_proj, a window of 8; mixtral:
                                                 MixtralForCausalLM, 4 experts, top 2, the
                                                 load-balancing loss; llama3:
                                                 LlamaForCausalLM with Llama 3.1's
                                                 rope_scaling; gemma2, gemma3: Gemma's
                                                 layers (Gemma 2 without soft-caps); mistral:
                                                 MistralForCausalLM, a sliding window of 8;
                                                 deepseek3: DeepseekV3ForCausalLM, latent
                                                 attention and grouped sigmoid experts)
    hf_family.py logits HF_DIR LOGITS_FILE       transformers' logits on the tokens of a
                                                 `claw eval --logits-file` file equal claw's
                                                 (1e-5 x max |logit|)
    hf_family.py grads HF_DIR GRADS_FILE         one training step: the mean cross-entropy of
                                                 the `claw eval --grads-file` batch and the
                                                 gradient of every parameter, in float64
                                                 from the same float32 weights, equal claw's
                                                 (loss 1e-6, each gradient 1e-5 x its max)
    hf_family.py same HF_DIR_A HF_DIR_B          the same tensors bit for bit, the same config
    hf_family.py generate HF_DIR N IDS           N greedy tokens after the prompt IDS with
                                                 generate() (JSON: tokens, top-1/top-2 gaps)
    hf_family.py check HF_DIR LOGITS GRADS HF_DIR_B N IDS OUT
                                                 logits, grads and same, then generate's
                                                 JSON into OUT, in one interpreter

Weights are drawn wider than transformers' default (std 0.2), and norms and
biases (zero and one by default) are perturbed, so that a misplaced bias or
norm shows and greedy choices are decided by clear margins.
"""
import json
import os
import sys

import torch
import transformers as tf
import transformers.generation.utils as gen_utils
from safetensors import safe_open
from safetensors.torch import load_file

# Debian's torch 1.13 cannot import torch.distributed.fsdp under Python 3.11;
# generate() imports it only to ask whether the model is FSDP-wrapped (under
# torch 2 the stub answers the same).
gen_utils.is_fsdp_managed_module = lambda module: False

SHAPE = dict(vocab_size=50257, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, initializer_range=0.2,
             bos_token_id=1, eos_token_id=2, torch_dtype="float32")
def deepseek3(eps, dense=1):
    return tf.DeepseekV3ForCausalLM(tf.DeepseekV3Config(
        **{**SHAPE, "num_key_value_heads": 4, "rms_norm_eps": eps}, rope_theta=1e4, tie_word_embeddings=False,
        q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, rope_interleave=True,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                      "mscale": 1.0, "mscale_all_dim": 1.0},
        n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, routed_scaling_factor=2.5,
        moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=dense, norm_topk_prob=True))


FAMILIES = {
    # Qwen 2 / 2.5: biases on q, k and v only; tied embeddings as the small Qwen 2.5 models have them.
    "qwen2": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(**SHAPE, rope_theta=1e6, tie_word_embeddings=True,
                                                         use_sliding_window=False)),
    # Qwen 3: per-head q/k RMSNorm, a head dimension of its own, no biases, tied embeddings (as 0.6B-4B),
    # with the YaRN scaling its model cards give for long contexts (factor 4 over an original 64 here).
    "qwen3": lambda: tf.Qwen3ForCausalLM(tf.Qwen3Config(**SHAPE, head_dim=32, rope_theta=1e6,
                                                         tie_word_embeddings=True, use_sliding_window=False,
                                                         rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                                       "original_max_position_embeddings": 64})),
    # Qwen3-MoE: Qwen 3's attention, 8 narrow experts top 2 (renormalised), layer 0 dense.
    "qwen3moe": lambda: tf.Qwen3MoeForCausalLM(tf.Qwen3MoeConfig(
        **SHAPE, head_dim=32, rope_theta=1e6, tie_word_embeddings=False, use_sliding_window=False, num_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[0], router_aux_loss_coef=0.01)),
    # Phi-3: q/k/v in one qkv_proj, gate/up in one gate_up_proj, Mistral's window; RoPE on 3/4 of
    # each head (12 of 16 dimensions) as Phi-4-mini has it.
    "phi3": lambda: tf.Phi3ForCausalLM(tf.Phi3Config(**SHAPE, rope_theta=1e4, sliding_window=8, pad_token_id=0,
                                                     original_max_position_embeddings=256,
                                                     partial_rotary_factor=0.75, tie_word_embeddings=False)),
    # Phi-3.5's LongRoPE: short factors up to the original context (16 here), long ones past it, cos and sin
    # times sqrt(1 + ln 16 / ln 16); the 32-token batches run long, generation crosses over mid-way.
    "phi3long": lambda: tf.Phi3ForCausalLM(tf.Phi3Config(
        **SHAPE, rope_theta=1e4, sliding_window=None, pad_token_id=0, original_max_position_embeddings=16,
        partial_rotary_factor=0.75, tie_word_embeddings=False,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.02, 1.05, 1.1, 1.2, 1.3],
                      "long_factor": [1.0, 1.5, 2.5, 4.0, 8.0, 16.0]})),
    # Mixtral: every layer 4 SwiGLU experts, top 2, with the load-balancing loss.
    "mixtral": lambda: tf.MixtralForCausalLM(tf.MixtralConfig(**SHAPE, rope_theta=1e6, num_local_experts=4,
                                                              num_experts_per_tok=2, router_aux_loss_coef=0.02,
                                                              sliding_window=None, tie_word_embeddings=False)),
    # Llama 3.1's RoPE scaling (factor 8 over an original context of 64 on heads of 16: one frequency
    # kept, two interpolated, five stretched).
    "llama3": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**SHAPE, rope_theta=1e4, tie_word_embeddings=False,
                                                         rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                                       "original_max_position_embeddings": 64})),
    # Gemma 2: GeGLU, (1 + w) norms on both sides of each sublayer, embeddings times sqrt(64), scores
    # by query_pre_attn_scalar 24 (not the head's 32), layer 0 windowed (8), layer 1 global; soft-caps
    # of 2 on the scores and 3 on the logits, low enough to bend this model's (the published 50 and 30
    # bend a trained one's).
    "gemma2": lambda: tf.Gemma2ForCausalLM(tf.Gemma2Config(**SHAPE, head_dim=32, query_pre_attn_scalar=24,
                                                           sliding_window=8, attn_logit_softcapping=2.0,
                                                           final_logit_softcapping=3.0, tie_word_embeddings=True)),
    # Gemma 3 (text): Gemma 2's layers with (1 + w) q/k norms, a windowed RoPE base of its own (10^4)
    # and a linearly scaled global one (10^6, factor 4).
    "gemma3": lambda: tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(
        **SHAPE, head_dim=32, query_pre_attn_scalar=24, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"], rope_theta=1e6, rope_local_base_freq=1e4,
        rope_scaling={"rope_type": "linear", "factor": 4.0}, tie_word_embeddings=True)),
    # OLMo 2: norms after the sublayers and none before, q/k norms over all heads' width; grouped
    # queries as in OLMo 2 32B.
    "olmo2": lambda: tf.Olmo2ForCausalLM(tf.Olmo2Config(**SHAPE, rope_theta=5e5, tie_word_embeddings=False)),
    # DeepSeek-V3: multi-head latent attention (queries through a rank-24 latent, keys and values
    # from a rank-16 one, heads of 16 + 8 rotated interleaved dimensions, values of 12), YaRN with
    # DeepSeek's mscale; layer 0 dense, layer 1 8 experts in 4 groups (2 chosen), sigmoid top 2 with
    # the expert bias, weights times 2.5, one shared expert.
    "deepseek3": lambda: deepseek3(1e-5),
    # Mistral: every layer attends over a sliding window (8 keys: the 32-token batches cross it).
    "mistral": lambda: tf.MistralForCausalLM(tf.MistralConfig(**SHAPE, rope_theta=1e6, sliding_window=8,
                                                              tie_word_embeddings=False)),
}

# The test models above that llama.cpp cannot run as they are, made as it can: its llama and phi3
# architectures attend over every key (no window), its qwen3moe has experts in every layer, and its
# deepseek2 one epsilon for every norm (DeepSeek's latent norms keep 1e-6, as DeepSeek-V3's rms_norm_eps).
LLAMACPP = {
    "deepseek3": lambda: deepseek3(1e-6),
    "mistral": lambda: tf.MistralForCausalLM(tf.MistralConfig(**SHAPE, rope_theta=1e6, sliding_window=None,
                                                              tie_word_embeddings=False)),
    "phi3": lambda: tf.Phi3ForCausalLM(tf.Phi3Config(**SHAPE, rope_theta=1e4, sliding_window=None, pad_token_id=0,
                                                     original_max_position_embeddings=256,
                                                     partial_rotary_factor=0.75, tie_word_embeddings=False)),
    "qwen3moe": lambda: tf.Qwen3MoeForCausalLM(tf.Qwen3MoeConfig(
        **SHAPE, head_dim=32, rope_theta=1e6, tie_word_embeddings=False, use_sliding_window=False, num_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], router_aux_loss_coef=0.01)),
}

# DeepSeek-V3's latent attention in dense layers only (first_k_dense_replace 2), for generation under
# tensor parallelism (tests/e2e/serve/tp_generate.sh), which runs dense models.
DENSE = {"deepseek3": lambda: deepseek3(1e-5, dense=2)}


def deepseek_router_in_model_dtype():
    """transformers' DeepSeek-V3 router casts its input and weight to float32 whatever the model's dtype, and
    the float64 reference then fails to add float64 expert outputs into its float32 sum: the router here
    runs in the model's dtype, with the same formulas (identical in float32)."""
    import transformers.models.deepseek_v3.modeling_deepseek_v3 as ds

    def forward(self, hidden_states):
        hidden_states = hidden_states.view(-1, self.config.hidden_size)
        scores = torch.nn.functional.linear(hidden_states, self.weight.type(hidden_states.dtype)).sigmoid()
        topk_indices = self.get_topk_indices(scores)
        topk_weights = scores.gather(1, topk_indices)
        if self.norm_topk_prob:
            topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + 1e-20)
        return topk_indices, topk_weights * self.routed_scaling_factor

    ds.DeepseekV3TopkRouter.forward = forward


if hasattr(tf, "DeepseekV3ForCausalLM"):
    deepseek_router_in_model_dtype()


def load(hf_dir):
    return tf.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32,
                                                   attn_implementation="eager").eval()


# The seed of each family's weights (7 unless listed): one whose 32 greedy tokens are decided by clear
# margins (deepseek3: the smallest top-1/top-2 gap 0.036; seed 7's was 3e-6; qwen3moe's llama.cpp variant:
# 0.023 in llama.cpp, 5e-4 with seed 7).
SEEDS = {"deepseek3": 13, "qwen3moe-llamacpp": 12}


def cmd_make(family, out, variant=""):
    torch.manual_seed(SEEDS.get(f"{family}-{variant}", SEEDS.get(family, 7)))
    model = {"": FAMILIES, "llamacpp": LLAMACPP, "dense": DENSE}[variant][family]().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            if name.endswith(".bias") or name.endswith("block_sparse_moe.gate.weight") or name.endswith("mlp.gate.weight"):
                p.normal_(0, 0.5)
        # DeepSeek-V3's expert bias (a buffer): positive, so that every kept group's keys beat the zeros
        # transformers puts on the others (DeepSeek's own gate and claw's put -inf there).
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.uniform_(0, 0.5)
    model.save_pretrained(out, safe_serialization=True)
    n = len(load_file(os.path.join(out, "model.safetensors")))
    print(f"made {out}: {type(model).__name__} by transformers {tf.__version__}, {n} tensors")


def cmd_logits(hf_dir, logits_file):
    model = load(hf_dir)
    got = load_file(logits_file)
    tokens = got["tokens"].long()
    with torch.no_grad():
        ref = model(tokens).logits.double()
    claw = got["logits"].double()[..., :ref.shape[-1]]
    assert claw.shape == ref.shape, f"claw's logits {tuple(claw.shape)}, transformers' {tuple(ref.shape)}"
    diff = (claw - ref).abs().max().item()
    tol = 1e-5 * ref.abs().max().item()
    print(f"{type(model).__name__}: max |claw - transformers| = {diff:.2e} over {tuple(ref.shape)} logits "
          f"(tolerance {tol:.1e})")
    assert diff <= tol, "logits differ"


def cmd_grads(hf_dir, grads_file):
    model = load(hf_dir).double()
    got = load_file(grads_file)
    with safe_open(grads_file, "pt") as f:
        hf_of = json.loads(f.metadata()["hf_names"])  # claw's parameter name -> transformers'
    tokens, targets = got["tokens"].long(), got["targets"].long()
    moe = getattr(model.config, "router_aux_loss_coef", 0) > 0
    out = model(tokens, output_router_logits=True) if moe else model(tokens)
    loss = torch.nn.functional.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), targets.reshape(-1))
    # The gradients are the objective's: with experts, plus claw's
    # load-balancing loss (Megatron's, summed over the layers: coeff E
    # sum_i f_i P_i with f_i the fraction of the N k choices that went to
    # expert i and P_i its mean softmax score) on transformers' router logits.
    # transformers' own pools the layers and has no 1/k; claw reports the
    # language-model loss alone.
    objective = loss
    if moe:
        cfg = model.config
        E = getattr(cfg, "num_local_experts", getattr(cfg, "num_experts", None))
        k = cfg.num_experts_per_tok
        for logits in (r for r in out.router_logits if r is not None):  # dense layers route nothing
            scores = torch.softmax(logits, dim=-1)
            chosen = torch.topk(scores, k, dim=-1).indices
            f = torch.nn.functional.one_hot(chosen, E).sum(dim=(0, 1)).double() / (logits.shape[0] * k)
            objective = objective + cfg.router_aux_loss_coef * E * (f * scores.mean(dim=0)).sum()
    objective.backward()
    claw_loss = got["loss"].item()
    print(f"loss: claw {claw_loss:.8f}, transformers {loss.item():.8f}")
    assert abs(claw_loss - loss.item()) <= 1e-6 * abs(loss.item()), "losses differ"
    params = dict(model.named_parameters())
    worst, covered = 0.0, {}
    for key, g in got.items():
        if not key.startswith("grad."):
            continue
        name = key[len("grad."):]
        hf = hf_of[name]
        if isinstance(hf, list) and hf[1] == "stack":  # experts stacked along dimension 0
            names = [hf[0].replace("{}", str(e)) for e in range(hf[2])]
            ref = torch.stack([params[n].grad for n in names])
            covered.update({n: params[n].shape[0] for n in names})
        elif isinstance(hf, list):  # a row slice of a fused tensor
            hf, dim, begin, end = hf
            assert dim == 0, hf_of[name]
            ref = params[hf].grad[begin:end]
            covered[hf] = covered.get(hf, 0) + (end - begin)
        else:
            ref = params[hf].grad
            covered[hf] = ref.shape[0]
        mine = g.double()[:ref.shape[0]] if g.shape != ref.shape else g.double()
        assert mine.shape == ref.shape, f"{name} ({hf}): claw {tuple(g.shape)}, transformers {tuple(ref.shape)}"
        rel = (mine - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
        worst = max(worst, rel)
        assert rel <= 1e-5, f"{name} ({hf}): gradients differ by {rel:.2e} of their largest"
    missing = sorted(n for n, p in params.items() if covered.get(n, 0) != p.shape[0])
    assert not missing, f"claw's gradients do not cover {missing}"
    print(f"gradients: {len(covered)} tensors, worst difference {worst:.2e} of the tensor's largest (tolerance 1e-5)")


def cmd_same(a, b):
    pa, pb = load_file(os.path.join(a, "model.safetensors")), load_file(os.path.join(b, "model.safetensors"))
    assert sorted(pa) == sorted(pb), f"tensor names differ: {sorted(set(pa) ^ set(pb))[:5]}"
    bad = [k for k in pa if pa[k].dtype != pb[k].dtype or pa[k].shape != pb[k].shape or not torch.equal(pa[k], pb[k])]
    assert not bad, f"{len(bad)} tensors differ, e.g. {bad[:3]}"
    ca, cb = (tf.AutoConfig.from_pretrained(d) for d in (a, b))
    assert type(ca) is type(cb), f"{type(ca).__name__} exported as {type(cb).__name__}"
    # Token ids are the tokenizer's (generation_config.json); Qwen 2's
    # max_window_layers means nothing without use_sliding_window.
    skip = {"_name_or_path", "transformers_version", "bos_token_id", "eos_token_id", "pad_token_id"}
    da, db = ca.to_dict(), cb.to_dict()
    if not da.get("use_sliding_window", True):  # Qwen: then the window fields mean nothing
        skip |= {"max_window_layers", "sliding_window"}
    diff = [(k, da.get(k), db.get(k)) for k in sorted(set(da) | set(db)) if k not in skip and da.get(k) != db.get(k)]
    assert not diff, f"config fields differ: {diff}"
    print(f"same: {len(pa)} tensors bitwise equal, {type(ca).__name__} fields agree")


def cmd_generate(hf_dir, n, ids):
    model = load(hf_dir)
    prompt = torch.tensor([[int(x) for x in ids.split(",")]])
    # LongRoPE: the model runs every position on the long factors once a sequence is longer than the original
    # context. generate() with its cache drops the cache at the cross-over and recomputes, but its tokens then
    # part from the model's own (a full forward per token, no cache) two tokens later; the oracle is the latter.
    rope = getattr(model.config, "rope_scaling", None) or {}
    use_cache = rope.get("type", rope.get("rope_type")) != "longrope"
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=int(n),
                             min_new_tokens=int(n), do_sample=False, output_scores=True, return_dict_in_generate=True,
                             pad_token_id=model.config.eos_token_id, use_cache=use_cache)
    gaps = [float(torch.topk(s[0], 2).values[0] - torch.topk(s[0], 2).values[1]) for s in out.scores]
    return json.dumps({"tokens": out.sequences[0, prompt.shape[1]:].tolist(), "gaps": gaps})


def cmd_check(hf_dir, logits_file, grads_file, exported_dir, n, ids, generated):
    """logits, grads and same, then generate into the file `generated`: one interpreter start, not four."""
    cmd_logits(hf_dir, logits_file)
    cmd_grads(hf_dir, grads_file)
    cmd_same(hf_dir, exported_dir)
    with open(generated, "w") as f:
        f.write(cmd_generate(hf_dir, n, ids))


if __name__ == "__main__":
    commands = {"make": cmd_make, "logits": cmd_logits, "grads": cmd_grads, "same": cmd_same, "check": cmd_check,
                "generate": lambda *a: print(cmd_generate(*a))}
    commands[sys.argv[1]](*sys.argv[2:])
