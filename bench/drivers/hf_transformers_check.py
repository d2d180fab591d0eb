"""claw's Hugging Face checkpoint export/import against `transformers` itself.

For each model family (gpt2: gpt2-tiny as GPT2LMHeadModel; llama: llama-tiny
as LlamaForCausalLM), on CPU in fp32:

  export    `claw train` a few steps and `claw ckpt export --format hf`; the
            exported config.json must describe the preset (config_mismatches),
            transformers must load the directory with no missing or unexpected
            tensors (load_problems), and its logits on the tokens of
            `claw eval --logits-file` must equal claw's (export_max_abs_diff);
  import    a randomly initialised transformers model of the same shape (biases
            and norm weights perturbed too, so a misplaced one shows), saved
            with save_pretrained(safe_serialization=True), read by
            `claw ckpt import --format hf`; `claw eval` of the result must give
            transformers' logits (import_max_abs_diff);
  reexport  `claw ckpt export` of the imported checkpoint must reproduce every
            tensor of the original model.safetensors bit for bit
            (torch.equal, same names, shapes and dtypes) and its config.

Logits agree within tol = TOL x max(1, max |transformers logits|) (TOL = 1e-4 by
default: fp32 with different summation orders; a wrong layout, epsilon or RoPE
convention is off by 1e-2 or more). Prints one line per figure,

    hf_check gpt2 export_max_abs_diff=1.20e-06 tol=4.1e-04 pass=1

and `hf_check all pass=1|0` last; exits 1 if any check failed.

    PY=$(tools/hf_env.sh)      # venv with transformers 4.49 over Debian's torch 1.13
    "$PY" bench/drivers/hf_transformers_check.py --claw build/bin/claw [--data-path PREFIX] [--keep DIR]
"""
import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers
    from safetensors.torch import load_file
except ImportError as e:
    sys.exit(f"hf_transformers_check.py: {e}; run it with the python that tools/hf_env.sh prints")

# --- claw's CLI: every command line this script runs is built here. ----------


def data_flags(a):
    return ["--data-path", *a.data_path.split()] if a.data_path else []


def claw_train(a, preset, ckpt):
    return [a.claw, "train", "--model", preset, "--train-iters", str(a.train_iters), "--save", ckpt,
            "--micro-batch-size", str(a.micro_batch_size), "--seq-length", str(a.seq_length),
            *data_flags(a), *shlex.split(a.train_args)]


def claw_export(a, ckpt, hf_dir):
    return [a.claw, "ckpt", "export", "--load", ckpt, "--format", "hf", "--output", hf_dir]


def claw_import(a, hf_dir, ckpt):
    return [a.claw, "ckpt", "import", "--format", "hf", "--input", hf_dir, "--save", ckpt]


def claw_eval(a, ckpt, logits_file):
    return [a.claw, "eval", "--load", ckpt, "--logits-file", logits_file, "--eval-iters", "1",
            "--micro-batch-size", str(a.micro_batch_size), "--seq-length", str(a.seq_length), *data_flags(a)]


# --- claw's presets (src/claw/model/config.cc) as transformers configs. ------
# gpt2-tiny: gpt2(4 layers, hidden 256, 4 heads): vocab 50257 (claw pads it to
# 50304 for --make-vocab-size-divisible-by 128; HF tensors carry the real 50257
# rows), 1024 learned positions, LayerNorm eps 1e-5, tanh GELU ("gelu_new"),
# FFN 4 x hidden, biases on, tied embeddings.
# llama-tiny: llama(4 layers, hidden 256, 8 heads, 2 query groups, FFN 768,
# vocab 50257, theta 1e4, 1024 positions): head dim 32, RMSNorm eps 1e-5 (claw's
# default --norm-epsilon; HF's LlamaConfig default is 1e-6, so it must be
# explicit), rotate-half RoPE, SwiGLU, no biases, untied LM head.
FAMILIES = {
    "gpt2": dict(
        preset="gpt2-tiny", arch="GPT2LMHeadModel",
        hf=dict(n_layer=4, n_embd=256, n_head=4, n_inner=None, vocab_size=50257, n_positions=1024,
                layer_norm_epsilon=1e-5, activation_function="gelu_new", tie_word_embeddings=True,
                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    "llama": dict(
        preset="llama-tiny", arch="LlamaForCausalLM",
        hf=dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                intermediate_size=768, vocab_size=50257, max_position_embeddings=1024, rms_norm_eps=1e-5,
                rope_theta=10000.0, rope_scaling=None, hidden_act="silu", attention_bias=False, mlp_bias=False,
                tie_word_embeddings=False, attention_dropout=0.0)),
}


def semantics(cfg):
    """The config fields that decide the function a model computes, with HF's defaults resolved."""
    if cfg.model_type == "gpt2":
        act = {"gelu_pytorch_tanh": "gelu_new"}.get(cfg.activation_function, cfg.activation_function)
        return dict(layers=cfg.n_layer, hidden=cfg.n_embd, heads=cfg.n_head, ffn=cfg.n_inner or 4 * cfg.n_embd,
                    vocab=cfg.vocab_size, positions=cfg.n_positions, eps=cfg.layer_norm_epsilon, act=act,
                    tied=cfg.tie_word_embeddings, scale_attn_weights=cfg.scale_attn_weights,
                    scale_by_layer=cfg.scale_attn_by_inverse_layer_idx)
    if cfg.model_type == "llama":
        return dict(layers=cfg.num_hidden_layers, hidden=cfg.hidden_size, heads=cfg.num_attention_heads,
                    kv_heads=cfg.num_key_value_heads,
                    head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
                    ffn=cfg.intermediate_size, vocab=cfg.vocab_size, positions=cfg.max_position_embeddings,
                    eps=cfg.rms_norm_eps, theta=cfg.rope_theta, rope_scaling=cfg.rope_scaling, act=cfg.hidden_act,
                    attention_bias=cfg.attention_bias, mlp_bias=getattr(cfg, "mlp_bias", False),
                    tied=cfg.tie_word_embeddings)
    return dict(model_type=cfg.model_type)


def config_mismatches(got, want):
    bad = []
    for k in sorted(set(got) | set(want)):
        g, w = got.get(k), want.get(k)
        same = math.isclose(g, w, rel_tol=1e-9) if isinstance(g, float) and isinstance(w, float) else g == w
        if not same:
            bad.append(f"{k}: got {g!r}, want {w!r}")
    return bad


# --- helpers -------------------------------------------------------------------

RESULTS = []  # one pass flag per reported figure


def report(family, figure, value, ok, extra=""):
    RESULTS.append(ok)
    v = f"{value:.2e}" if isinstance(value, float) else str(value)
    print(f"hf_check {family} {figure}={v}{' ' + extra if extra else ''} pass={int(bool(ok))}", flush=True)


def run(cmd):
    print("+ " + shlex.join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:])
        raise RuntimeError(f"exit {p.returncode}: {shlex.join(cmd)}")
    return p.stdout


def read_logits(path, vocab):
    """tokens [B, T] int32, logits [B, T, V] f32 and optional position ids from `claw eval --logits-file`."""
    t = load_file(path)
    tokens, logits = t["tokens"], t["logits"]
    if tokens.dtype != torch.int32 or tokens.dim() != 2:
        raise RuntimeError(f"{path}: tokens must be int32 [B, T], got {tokens.dtype} {list(tokens.shape)}")
    if logits.dtype != torch.float32 or list(logits.shape) != [*tokens.shape, vocab]:
        raise RuntimeError(f"{path}: logits must be f32 [B, T, V={vocab}] for tokens {list(tokens.shape)}, "
                           f"got {logits.dtype} {list(logits.shape)}")
    positions = t.get("positions", t.get("position_ids"))
    return tokens.long(), logits, None if positions is None else positions.long()


def hf_model(fam, hf_dir):
    cls = getattr(transformers, FAMILIES[fam]["arch"])
    model, info = cls.from_pretrained(hf_dir, output_loading_info=True, attn_implementation="eager",
                                      torch_dtype=torch.float32)
    return model.eval(), info


def hf_logits(model, tokens, positions):
    with torch.no_grad():
        return model(input_ids=tokens, position_ids=positions, use_cache=False).logits.float()


def compare_logits(family, figure, ours, ref, tol_scale):
    diff = (ours - ref).abs().max().item()
    tol = tol_scale * max(1.0, ref.abs().max().item())
    report(family, figure, diff, diff <= tol and math.isfinite(diff), f"tol={tol:.1e}")


def random_hf_model(fam, seed):
    """A transformers model of the preset's shape with random weights everywhere (HF's init leaves biases 0
    and norm weights 1, which would hide a misplaced bias or norm)."""
    spec = FAMILIES[fam]
    torch.manual_seed(seed)
    cfg = getattr(transformers, spec["arch"]).config_class(**spec["hf"])
    model = getattr(transformers, spec["arch"])(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.02)
            elif p.dim() == 1:  # LayerNorm / RMSNorm weights
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    return model


# --- the checks ----------------------------------------------------------------


def expected(fam):
    spec = FAMILIES[fam]
    return spec, semantics(getattr(transformers, spec["arch"]).config_class(**spec["hf"]))


def check_export(a, fam, d):
    """1. export: claw-trained checkpoint -> HF dir -> transformers."""
    spec, want = expected(fam)
    run(claw_train(a, spec["preset"], d("ckpt")))
    run(claw_export(a, d("ckpt"), d("hf_export")))
    cfg = transformers.AutoConfig.from_pretrained(d("hf_export"))
    bad = config_mismatches(semantics(cfg), want)
    if (cfg.architectures or [None])[0] != spec["arch"]:
        bad.append(f"architectures: got {cfg.architectures}, want ['{spec['arch']}']")
    report(fam, "export_config_mismatches", len(bad), not bad, ("# " + "; ".join(bad)) if bad else "")
    model, info = hf_model(fam, d("hf_export"))
    problems = [f"{k}: {v}" for k, v in info.items() if v and k != "error_msgs"] + list(info.get("error_msgs", []))
    report(fam, "export_load_problems", len(problems), not problems, ("# " + "; ".join(map(str, problems))) if problems else "")
    run(claw_eval(a, d("ckpt"), d("export_logits.safetensors")))
    tokens, claw_out, positions = read_logits(d("export_logits.safetensors"), want["vocab"])
    compare_logits(fam, "export_max_abs_diff", claw_out, hf_logits(model, tokens, positions), a.tol)


def check_import(a, fam, d):
    """2. import: random transformers model -> save_pretrained -> claw; 3. export it again."""
    spec, want = expected(fam)
    ref = random_hf_model(fam, a.seed)
    ref.save_pretrained(d("hf_ref"), safe_serialization=True)
    run(claw_import(a, d("hf_ref"), d("ckpt_imported")))
    run(claw_eval(a, d("ckpt_imported"), d("import_logits.safetensors")))
    tokens, claw_out, positions = read_logits(d("import_logits.safetensors"), want["vocab"])
    ref_model, _ = hf_model(fam, d("hf_ref"))
    compare_logits(fam, "import_max_abs_diff", claw_out, hf_logits(ref_model, tokens, positions), a.tol)

    # 3. export after import: the same tensors, bit for bit.
    run(claw_export(a, d("ckpt_imported"), d("hf_reexport")))
    orig = load_file(d("hf_ref", "model.safetensors"))
    again = load_file(d("hf_reexport", "model.safetensors"))
    unequal = [k for k in orig if k in again and not (orig[k].dtype == again[k].dtype and torch.equal(orig[k], again[k]))]
    missing = sorted(set(orig) - set(again))
    extra = sorted(set(again) - set(orig))
    why = "; ".join(f"{n}: {', '.join(ks[:4])}{' ...' if len(ks) > 4 else ''}"
                    for n, ks in (("unequal", unequal), ("missing", missing), ("extra", extra)) if ks)
    report(fam, "reexport_unequal_tensors", len(unequal) + len(missing) + len(extra),
           not (unequal or missing or extra), f"of={len(orig)}" + (" # " + why if why else ""))
    bad = config_mismatches(semantics(transformers.AutoConfig.from_pretrained(d("hf_reexport"))), want)
    report(fam, "reexport_config_mismatches", len(bad), not bad, ("# " + "; ".join(bad)) if bad else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claw", default="build/bin/claw")
    ap.add_argument("--families", default="gpt2,llama", help="comma-separated subset of: " + ", ".join(FAMILIES))
    ap.add_argument("--data-path", default="", help="claw --data-path (default: claw's built-in corpus)")
    ap.add_argument("--train-iters", type=int, default=3)
    ap.add_argument("--train-args", default="", help="extra `claw train` flags, one string")
    ap.add_argument("--micro-batch-size", type=int, default=2)
    ap.add_argument("--seq-length", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1234, help="seed of the transformers model for the import check")
    ap.add_argument("--tol", type=float, default=1e-4, help="logit tolerance relative to max(1, max |logit|)")
    ap.add_argument("--keep", default="", help="work in this directory and keep it (default: a temporary one)")
    a = ap.parse_args()
    a.claw = os.path.abspath(a.claw) if os.path.exists(a.claw) else a.claw

    print(f"# transformers {transformers.__version__}, torch {torch.__version__}", file=sys.stderr)
    tmp = None if a.keep else tempfile.TemporaryDirectory(prefix="hf_check_")
    work = a.keep or tmp.name
    os.makedirs(work, exist_ok=True)
    for fam in a.families.split(","):
        if fam not in FAMILIES:
            ap.error(f"unknown family {fam!r}; valid: {', '.join(FAMILIES)}")
        d = lambda *p, fam=fam: os.path.join(work, fam, *p)  # noqa: E731
        os.makedirs(d(), exist_ok=True)
        for part in (check_export, check_import):
            try:
                part(a, fam, d)
            except Exception as e:  # a failed step fails its part; the other parts still run
                print(f"# {fam}: {type(e).__name__}: {e}", file=sys.stderr)
                msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                report(fam, part.__name__.replace("check_", "") + "_error", json.dumps(msg), False)
    ok = bool(RESULTS) and all(RESULTS)
    print(f"hf_check all pass={int(ok)}")
    if tmp:
        tmp.cleanup()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
