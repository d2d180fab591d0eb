"""GGUF files as llama.cpp users have them, made by llama.cpp's own tools,
read and run by claw.

A model of FAMILY with random weights (transformers, seeded) and a real
vocabulary (tokenizer.json built from llama.cpp's ggml-vocab files by
hf_json_from_gguf.py) goes through llama.cpp's convert_hf_to_gguf.py (f32),
then llama-quantize at each type. For every file:

  - claw's dequantization of every tensor (gguf_quant_driver) equals
    gguf-py's `quants.dequantize` bit for bit;
  - `claw generate` (the file's own types: K-quant products against 8-bit
    activations, as llama.cpp computes them) and llama.cpp (libllama, f32 KV
    cache) give the same 64 greedy tokens, and the logits of each step
    agree: max |claw - llama.cpp| / max |llama.cpp| per step, the largest
    over the steps, within TOLERANCE;
  - with --text (GPT-2): `claw perplexity --score-second-half` equals
    llama-perplexity's figure on the F32 and Q4_K_M files within 0.1%.

    python gguf_quants.py make FAMILY DIR
    python gguf_quants.py check FAMILY DIR --claw CLAW --driver DRIVER --llamacpp SRC --bin BIN

Prints one line per file (type, tensors, the largest relative logit
difference, the smallest llama.cpp top-1/top-2 gap).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

# Every type on the Llama; the types people download most on the others.
ALL_TYPES = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M",
             "Q6_K", "IQ4_XS"]
COMMON_TYPES = ["F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS"]
TOLERANCE = 1e-4
# F32 files: llama.cpp's arithmetic is fp32 as claw's, but its GELU (GPT-2,
# Gemma) reads a table of f16 values at x rounded to f16.
F32_TOLERANCE = {"gpt2": 1e-3, "gemma3": 1e-3}
PROMPT = [1, 450, 4996, 17354, 1701, 432, 17204, 975, 278, 17366, 11203, 29889, 13, 3492, 338, 263]
STEPS = 64


def make(family, out, models):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer"))
    import hf_json_from_gguf
    import torch
    import transformers

    torch.manual_seed(5)
    shape = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256)
    gpt2_tokens = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "tokenizer_class": "GPT2TokenizerFast"}
    if family == "llama":  # Llama 2's SentencePiece vocabulary (convert_hf_to_gguf.py's LlamaHfVocab)
        tok, _ = hf_json_from_gguf.build("llama2", models)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=32000, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, **shape))
        tok_cfg = {"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>",
                   "tokenizer_class": "LlamaTokenizerFast"}
    elif family == "gpt2":
        tok, _ = hf_json_from_gguf.build("gpt-2", models)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=50257, n_positions=256, n_embd=256, n_layer=2, n_head=4))
        model.config.n_ctx = 256  # the converter reads GPT-2's original key
        tok_cfg = gpt2_tokens
    elif family == "qwen2":  # the Qwen 2.5 shape (biases on q/k/v, tied embeddings) with GPT-2's vocabulary
        tok, _ = hf_json_from_gguf.build("gpt-2", models)
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
            vocab_size=50257, rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=50256, eos_token_id=50256,
            **shape))
        tok_cfg = gpt2_tokens
    elif family == "gemma3":  # Gemma 3's text model (q/k norms, local and global layers) with GPT-2's vocabulary
        tok, _ = hf_json_from_gguf.build("gpt-2", models)
        model = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(
            vocab_size=50257, head_dim=64, query_pre_attn_scalar=64, sliding_window=8, bos_token_id=50256,
            eos_token_id=50256, pad_token_id=0, **shape))
        tok_cfg = gpt2_tokens
    else:
        raise SystemExit(f"gguf_quants.py: unknown family {family} (llama, gpt2, qwen2, gemma3)")
    # Matrices large enough that the logits spread (a few units); norm weights
    # not all 1: with a quantized embedding table they would keep its rows'
    # values exact multiples of one step through the first norm, whose
    # activation quantization then meets exact ties (x / max = k + 1/2) that
    # the last bit of either side's arithmetic decides.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.06)
            elif name.endswith("bias"):
                p.normal_(0, 0.02)
            else:
                p.normal_(1, 0.1) if "gemma" not in family else p.normal_(0, 0.1)  # Gemma's norms scale by 1 + w
    model.save_pretrained(out, safe_serialization=True)
    shutil.copy(tok, os.path.join(out, "tokenizer.json"))
    json.dump(tok_cfg, open(os.path.join(out, "tokenizer_config.json"), "w"))


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {what} (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return r.stdout


def gguf_tensors(path):
    """(name, GGMLQuantizationType, raw bytes) of each tensor of a GGUF file,
    by its layout (the format's spec). gguf-py's GGUFReader gives the same but
    builds every metadata value as numpy views first: 4 s a file for GPT-2's
    100,000 vocabulary and merge strings, most of this test's time."""
    import struct
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    data = np.memmap(path, dtype=np.uint8, mode="r")
    buf = memoryview(data)
    magic, version, n_tensors, n_kv = struct.unpack_from("<IIQQ", buf, 0)
    assert magic == 0x46554747 and version == 3, (path, magic, version)
    at = 24
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string():
        nonlocal at
        n, = struct.unpack_from("<Q", buf, at)
        at += 8 + n
        return bytes(buf[at - n:at]).decode()

    alignment = 32
    for _ in range(n_kv):
        key = string()
        kind, = struct.unpack_from("<I", buf, at)
        at += 4
        if kind == 9:  # array: element type, count, elements
            kind, count = struct.unpack_from("<IQ", buf, at)
            at += 12
            if kind == 8:
                for _ in range(count):
                    string()
            else:
                at += scalar[kind] * count
        elif kind == 8:
            string()
        else:
            if key == "general.alignment":
                alignment, = struct.unpack_from("<I", buf, at)
            at += scalar[kind]
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims, = struct.unpack_from("<I", buf, at)
        shape = struct.unpack_from(f"<{dims}Q", buf, at + 4)
        kind, offset = struct.unpack_from("<IQ", buf, at + 4 + 8 * dims)
        at += 4 + 8 * dims + 12
        infos.append((name, shape, GGMLQuantizationType(kind), offset))
    start = (at + alignment - 1) // alignment * alignment
    for name, shape, kind, offset in infos:
        block, size = GGML_QUANT_SIZES[kind]
        count = int(np.prod(shape))
        yield name, kind, data[start + offset:start + offset + count // block * size]


def check_dequant(path, driver, work):
    from gguf.quants import dequantize

    raw = os.path.join(work, "dequant.f32")
    listing = json.loads(run([driver, "dequant", path, raw], f"claw's dequantization of {path}"))
    claw = np.fromfile(raw, dtype=np.float32)
    at, types = 0, set()
    tensors = list(gguf_tensors(path))
    assert len(tensors) == len(listing), (path, len(tensors), len(listing))
    for (name, kind, raw_bytes), c in zip(tensors, listing):
        assert name == c["name"], (name, c["name"])
        ref = dequantize(raw_bytes, kind).astype(np.float32).reshape(-1)
        mine = claw[at:at + c["count"]]
        at += c["count"]
        assert mine.size == ref.size, (name, mine.size, ref.size)
        if not np.array_equal(mine.view(np.uint32), ref.view(np.uint32)):
            bad = np.flatnonzero(mine.view(np.uint32) != ref.view(np.uint32))
            sys.exit(f"FAIL: {path}: tensor {name} ({c['type']}) differs from gguf-py's dequantize at {bad.size} "
                     f"elements, first {bad[0]}: claw {mine[bad[0]]!r}, gguf-py {ref[bad[0]]!r}")
        types.add(c["type"])
    assert at == claw.size
    return len(listing), sorted(types)


# The types claw writes (kernels::weight_type_quantizable) but BF16.
WRITTEN_TYPES = ["F16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                 "IQ4_XS"]
KERNEL_TYPES = {"F16": 1, "Q8_0": 8, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "IQ4_NL": 20, "Q2_K": 10, "Q3_K": 11,
                "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "IQ4_XS": 23}


def check_kernels(driver, bin_dir, work):
    """claw's linear layer against llama.cpp's own CPU kernels (libggml-cpu,
    through ctypes) on the same rows: weights quantized by llama.cpp
    (ggml_quantize_chunk), activations quantized to the vec-dot type by each
    side (the bytes must be equal), then every output of claw's
    weight_linear_forward against ggml's vec_dot of that row pair (equal but
    for the order of the fp32 sums)."""
    import ctypes
    base = ctypes.CDLL(os.path.join(bin_dir, "libggml-base.so"))
    cpu = ctypes.CDLL(os.path.join(bin_dir, "libggml-cpu.so"))

    class Traits(ctypes.Structure):
        _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p), ("vec_dot_type", ctypes.c_int),
                    ("nrows", ctypes.c_int64)]
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(Traits)
    cpu.ggml_cpu_init()
    base.ggml_quantize_chunk.restype = ctypes.c_size_t
    base.ggml_row_size.restype = ctypes.c_size_t
    from_float_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    vec_dot_t = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                 ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    rng = np.random.default_rng(3)
    K, N = 768, 24
    # Activations as layers see them: Gaussian, heavy-tailed, one outlier, all
    # zero, tiny values, a constant row.
    x = np.stack([rng.normal(0, 1, K), rng.standard_t(3, K), np.r_[rng.normal(0, 0.1, K - 1), 40.0], np.zeros(K),
                  rng.normal(0, 1e-6, K), np.full(K, -0.37)]).astype(np.float32)
    M = x.shape[0]
    w = (rng.normal(0, 0.05, (N, K)) * rng.uniform(0.2, 3, (N, 1))).astype(np.float32)
    # Rows that meet the quantizers' edge cases: all zero, tiny, a constant,
    # positive only, heavy-tailed with an outlier.
    w[N - 5] = 0
    w[N - 4] = rng.normal(0, 1e-9, K)
    w[N - 3] = 0.02
    w[N - 2] = np.abs(w[N - 2])
    w[N - 1] = rng.standard_t(2, K) * 0.01
    w[N - 1, 100] = 3.0
    worst, written = 0.0, []
    for name, t in KERNEL_TYPES.items():
        rb = base.ggml_row_size(t, K)
        wq = np.zeros(N * rb, np.uint8)
        base.ggml_quantize_chunk(t, w.ctypes.data, wq.ctypes.data, 0, N, K, None)
        if name in WRITTEN_TYPES:  # claw's own quantization of the same rows: llama.cpp's bytes
            w.tofile(os.path.join(work, "w.f32"))
            run([driver, "quantize", str(t), str(K), str(N), os.path.join(work, "w.f32"), os.path.join(work, "q.bin")],
                f"claw's {name} quantization")
            mine = np.fromfile(os.path.join(work, "q.bin"), np.uint8)
            if not np.array_equal(mine, wq):
                bad = np.flatnonzero(mine != wq)
                sys.exit(f"FAIL: {name}: claw quantizes weights to other bytes than llama.cpp's ggml_quantize_chunk "
                         f"({bad.size} of {wq.size} differ, first at byte {bad[0] % rb} of row {bad[0] // rb})")
            written.append(name)
        traits = cpu.ggml_get_type_traits_cpu(t).contents
        xt = traits.vec_dot_type
        xb = base.ggml_row_size(xt, K)
        xq = np.zeros(M * xb, np.uint8)
        for m in range(M):
            from_float_t(cpu.ggml_get_type_traits_cpu(xt).contents.from_float)(x[m].ctypes.data,
                                                                                xq[m * xb:].ctypes.data, K)
        ref = np.zeros((M, N), np.float32)
        out = np.zeros(1, np.float32)
        for m in range(M):
            for n in range(N):
                vec_dot_t(traits.vec_dot)(K, out.ctypes.data, 0, wq[n * rb:].ctypes.data, 0, xq[m * xb:].ctypes.data,
                                          0, 1)
                ref[m, n] = out[0]
        paths = [os.path.join(work, f) for f in ("w.bin", "x.f32", "y.f32", "xq.bin")]
        wq.tofile(paths[0])
        x.tofile(paths[1])
        run([driver, "linear", str(t), str(K), str(N), str(M)] + paths, f"claw's {name} linear layer")
        y = np.fromfile(paths[2], np.float32).reshape(M, N)
        mine = np.fromfile(paths[3], np.uint8)
        if not np.array_equal(mine, xq):
            bad = np.flatnonzero(mine != xq)
            sys.exit(f"FAIL: {name}: claw quantizes the activations to other bytes than llama.cpp ({bad.size} "
                     f"differ, first at byte {bad[0]} of {xb} a row)")
        # |sum| can be far below sum |terms|: the fp32 order's error scales with the latter.
        scale = np.abs(w_deq(name, wq, t, N, K, base)) @ np.abs(x.T).astype(np.float64)
        rel = float((np.abs(y - ref) / np.maximum(scale.T, 1e-30)).max())
        worst = max(worst, rel)
        if rel > 1e-6:
            sys.exit(f"FAIL: {name}: claw's products differ from llama.cpp's vec_dot by {rel:.2e} of the sum of "
                     f"|terms| (fp32 order alone gives below 1e-6)")
    print(f"quantizers: claw's {', '.join(written)} of {N} rows of {K} (zero, tiny, constant, positive and "
          f"heavy-tailed rows among them) equal llama.cpp's ggml_quantize_chunk byte for byte", flush=True)
    print(f"kernels: {len(KERNEL_TYPES)} types x {N} rows x {M} activation rows of {K}: claw's activation bytes equal "
          f"llama.cpp's and its products equal llama.cpp's vec_dot within {worst:.1e} of the sum of |terms|",
          flush=True)


def w_deq(name, wq, t, N, K, base):
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize
    return dequantize(wq.reshape(N, -1), GGMLQuantizationType(t)).astype(np.float64).reshape(N, K)


def llamacpp(a, path, prompt, work):
    """llama.cpp's greedy tokens, gaps and logits [STEPS, vocabulary] on a file."""
    logits = os.path.join(work, "llamacpp.f32")
    ref = json.loads(run([a.greedy, path, prompt, str(STEPS), "2", logits], f"llama.cpp on {path}"))
    return ref["tokens"], ref["gaps"], np.fromfile(logits, dtype=np.float32).reshape(STEPS, -1)


def claw(a, path, prompt, work, vocab):
    from safetensors.numpy import load_file
    st = os.path.join(work, "claw.st")
    out = json.loads(run([a.claw, "generate", "--model", path, "--prompt-tokens", prompt, "--max-tokens", str(STEPS),
                          "--ignore-eos", "--output-format", "json", "--num-threads", "2", "--logits-file", st],
                         f"claw generate on {path}"))
    logits = load_file(st)["logits"]
    assert logits.shape[0] == STEPS and logits.shape[1] >= vocab, logits.shape
    return out["tokens"], logits[:, :vocab]


def compare(tok_a, log_a, tok_b, log_b):
    """The steps both runs share (until their tokens differ, that step
    included) and the largest max|a - b| / max|b| over them."""
    same = next((i for i, (x, y) in enumerate(zip(tok_a, tok_b)) if x != y), STEPS)
    rel = np.abs(log_a - log_b).max(axis=1) / np.abs(log_b).max(axis=1)
    return same, float(rel[:same + 1].max())


# The file types claw writes (claw ckpt export --format gguf --type): the
# llama-quantize recipes and the single types with its rules; all on the
# Llama, the types people download most (COMMON_TYPES) on the others.
RECIPES = ["F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1", "Q5_0", "Q4_K_M", "Q4_K_S", "Q4_1", "Q3_K_L", "Q3_K_M",
           "Q3_K_S", "Q2_K", "IQ4_XS", "IQ4_NL"]


def check_written(a, work, quantize):
    """claw's own files: the model imported into a claw checkpoint and
    exported at each type claw writes, against llama-quantize's file of the
    same type made from claw's F32 export: every tensor of the same type and
    the same bytes. Returns {type: claw's file}."""
    ck = os.path.join(work, "ck")
    run([a.claw, "ckpt", "import", "--input", os.path.join(work, "hf"), "--save", ck], "claw ckpt import")

    def export(t, path):
        run([a.claw, "ckpt", "export", "--load", ck, "--format", "gguf", "--type", t.lower(), "--output", path],
            f"claw ckpt export --type {t.lower()}")
    f32 = os.path.join(work, "c-F32.gguf")
    export("F32", f32)
    files = {}
    for t in RECIPES if a.family == "llama" else COMMON_TYPES:
        mine, ref = os.path.join(work, f"c-{t}.gguf"), os.path.join(work, f"l-{t}.gguf")
        export(t, mine)
        run([quantize, f32, ref, t, "2"], f"llama-quantize {t} of claw's F32 file")
        a_t = {n: (k, b) for n, k, b in gguf_tensors(mine)}
        b_t = {n: (k, b) for n, k, b in gguf_tensors(ref)}
        if a_t.keys() != b_t.keys():
            sys.exit(f"FAIL: claw's {t} file and llama-quantize's hold other tensors: {sorted(a_t.keys() ^ b_t.keys())}")
        mix = {}
        for n, (k, b) in a_t.items():
            if k != b_t[n][0]:
                sys.exit(f"FAIL: {t}: claw writes {n} as {k.name}, llama-quantize as {b_t[n][0].name}")
            if not np.array_equal(b, b_t[n][1]):
                bad = np.flatnonzero(np.asarray(b) != np.asarray(b_t[n][1]))
                sys.exit(f"FAIL: {t}: {n} ({k.name}) differs from llama-quantize's at {bad.size} of {b.size} bytes")
            mix[k.name] = mix.get(k.name, 0) + 1
        print(f"{a.family} {t:7s} claw ckpt export writes llama-quantize's file: {len(a_t)} tensors of the same types "
              f"({', '.join(f'{n} {k}' for k, n in sorted(mix.items()))}) and bytes", flush=True)
        files[t] = mine
    os.remove(f32)
    return files


def check(a):
    work = a.dir
    if a.family == "llama":
        check_kernels(a.driver, a.bin, work)
    f32 = os.path.join(work, "m-F32.gguf")
    run([sys.executable, os.path.join(a.llamacpp, "convert_hf_to_gguf.py"), os.path.join(work, "hf"), "--outtype",
         "f32", "--outfile", f32], "convert_hf_to_gguf.py")
    quantize = os.path.join(a.bin, "llama-quantize")
    written = check_written(a, work, quantize)
    prompt = ",".join(map(str, PROMPT))
    failures = []
    for qt in ["F32"] + (ALL_TYPES if a.family == "llama" else COMMON_TYPES):
        # The types claw writes are run from claw's own file (llama-quantize's
        # bytes, above); the others from llama-quantize's of the converter's.
        path = written.get(qt, os.path.join(work, f"m-{qt}.gguf"))
        if qt != "F32" and qt not in written:
            run([quantize, f32, path, qt, "2"], f"llama-quantize {qt}")
        n, types = check_dequant(path, a.driver, work)
        ref_tokens, gaps, ref = llamacpp(a, path, prompt, work)
        tokens, mine = claw(a, path, prompt, work, ref.shape[1])
        same, rel = compare(tokens, mine, ref_tokens, ref)
        if qt == "F32":
            bound, noise = F32_TOLERANCE.get(a.family, 1e-5), 0.0
            if same < STEPS:
                failures.append(f"F32: claw's greedy tokens differ from llama.cpp's at step {same}")
        else:
            # What the activations' quantization does to llama.cpp's own
            # logits: the file against its weights dequantized to f32.
            deq = os.path.join(work, f"m-{qt}-deq.gguf")
            run([quantize, "--allow-requantize", path, deq, "F32", "2"], f"llama-quantize {qt} to F32")
            deq_tokens, _, deq_logits = llamacpp(a, deq, prompt, work)
            noise = compare(ref_tokens, ref, deq_tokens, deq_logits)[1]
            bound = 2 * max(noise, TOLERANCE)
            os.remove(deq)
        print(f"{a.family} {qt:7s} {n} tensors ({', '.join(types)}): dequantization equals gguf-py's; "
              + (f"{STEPS} greedy tokens equal llama.cpp's" if same == STEPS else
                 f"greedy tokens equal llama.cpp's until step {same} (its top-2 gap there {gaps[same]:.1e})")
              + f"; logits within {rel:.1e} relative"
              + (f" (llama.cpp's own activation rounding: {noise:.1e})" if qt != "F32" else ""), flush=True)
        if rel > bound:
            failures.append(f"{qt}: claw's logits differ from llama.cpp's by {rel:.2e} relative (bound {bound:.2e})")
    if a.text:
        failures += check_perplexity(a, work)
    if failures:
        sys.exit("FAIL: " + "\nFAIL: ".join(failures))


def check_perplexity(a, work, ctx=128, chunks=24):
    """claw perplexity --score-second-half against llama-perplexity on the
    same file and text: the same quantity (the second half of each window of
    ctx tokens scored), within 0.1%."""
    import re
    failures = []
    for qt in ("F32", "Q4_K_M"):  # the converter's files: they carry the vocabulary llama-perplexity tokenizes with
        path = os.path.join(work, f"m-{qt}.gguf")
        if not os.path.exists(path):
            run([os.path.join(a.bin, "llama-quantize"), os.path.join(work, "m-F32.gguf"), path, qt, "2"],
                f"llama-quantize {qt}")
        mine = json.loads(run([a.claw, "perplexity", "--model", path, "--text-file", a.text, "--ctx-size", str(ctx),
                               "--chunks", str(chunks), "--score-second-half", "--num-threads", "2",
                               "--output-format", "json"], f"claw perplexity on {path}").strip().splitlines()[-1])
        r = subprocess.run([os.path.join(a.bin, "llama-perplexity"), "-m", path, "-f", a.text, "-c", str(ctx), "-b",
                            str(ctx), "--chunks", str(chunks), "-t", "2"], capture_output=True, text=True)
        m = re.search(r"Final estimate: PPL = ([0-9.]+)", r.stdout + r.stderr)
        if r.returncode != 0 or not m:
            return [f"llama-perplexity on {path} (exit {r.returncode}): {r.stderr[-1500:]}"]
        ref = float(m.group(1))
        rel = mine["perplexity"] / ref - 1
        print(f"{a.family} {qt:7s} perplexity over {mine['tokens']} tokens ({chunks} windows of {ctx}, second halves): "
              f"claw {mine['perplexity']:.4f}, llama-perplexity {ref:.4f} ({100 * rel:+.4f}%)", flush=True)
        if abs(rel) > 1e-3:
            failures.append(f"{qt}: claw's perplexity {mine['perplexity']:.4f} differs from llama-perplexity's "
                            f"{ref:.4f} by {100 * rel:+.3f}% (bound 0.1%)")
    return failures


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["make", "check"])
    p.add_argument("family")
    p.add_argument("dir")
    p.add_argument("--claw")
    p.add_argument("--driver")
    p.add_argument("--greedy")
    p.add_argument("--llamacpp", required=True)
    p.add_argument("--bin")
    p.add_argument("--text", help="with it: claw perplexity against llama-perplexity on this text (F32, Q4_K_M)")
    a = p.parse_args()
    sys.path.insert(0, os.path.join(a.llamacpp, "gguf-py"))
    if a.what == "make":
        make(a.family, os.path.join(a.dir, "hf"), os.path.join(a.llamacpp, "models"))
    else:
        check(a)


if __name__ == "__main__":
    main()
