"""tokenizer.json files shaped as each family's published file, built from
llama.cpp's vocabularies (models/ggml-vocab-*.gguf): the Hub is out of
reach, and transformers' own GGUF conversion writes GPT-2's pre-tokenizer
for every byte-level vocabulary. Each file is checked against llama.cpp's
own cases for its vocabulary (.inp/.out) with the tokenizers library before
it is used as an oracle (hf_vs_tokenizers.py).

    FAMILIES[name] = (gguf vocabulary, builder)

Byte-level (GPT-2 alphabet): gpt-2, llama3 (Llama 3), qwen2 (Qwen 2/2.5/3:
NFC), qwen35 (Qwen 3.5: no NFC), deepseek-llm, deepseek-coder, starcoder.
SentencePiece-style BPE (byte fallback): llama2 (Llama 2's legacy file:
Prepend + Replace), phi3 (the same shape with Phi-3's vocabulary), mistral
(Llama 2's vocabulary behind a Metaspace pre-tokenizer and decoder, as
transformers writes non-legacy files), gemma (Gemma's: Replace, no prefix).
qwen2-flags: Qwen 2 with lstrip/rstrip/single_word/normalized added tokens,
to exercise the added-token rules.
"""
import hashlib
import json
import os
import struct

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK_LLM = [
    "[\r\n]",
    ("\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376"
     "\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
     "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
     "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d"
     "\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb"
     "\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128"
     "\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4"
     "\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
     "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
     "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+"),
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    "\\s+$",
    "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
    "\\p{N}+",
]
DEEPSEEK_CODER = ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"]


def split(regex, behavior="Isolated", invert=False):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": behavior, "invert": invert}


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


# GGUF metadata value types: struct format and size (strings and arrays apart).
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def _metadata(path):
    """A GGUF file's key/value metadata (the format's own layout, read with
    struct: the gguf package's reader takes ~25 s on a 262k-token file)."""
    buf = open(path, "rb").read()
    assert buf[:4] == b"GGUF", f"{path}: not a GGUF file"
    _, _, n_kv = struct.unpack_from("<IQQ", buf, 4)
    at = 24

    def string(at):
        (n,) = struct.unpack_from("<Q", buf, at)
        return buf[at + 8:at + 8 + n].decode("utf-8"), at + 8 + n

    def value(kind, at):
        if kind == 8:
            return string(at)
        if kind == 9:
            item, n = struct.unpack_from("<IQ", buf, at)
            at += 12
            if item == 8:
                out = []
                for _ in range(n):
                    v, at = string(at)
                    out.append(v)
                return out, at
            fmt = _SCALARS[item]
            return list(struct.unpack_from(f"<{n}{fmt}", buf, at)), at + n * struct.calcsize(fmt)
        fmt = _SCALARS[kind]
        return struct.unpack_from("<" + fmt, buf, at)[0], at + struct.calcsize(fmt)

    md = {}
    for _ in range(n_kv):
        key, at = string(at)
        (kind,) = struct.unpack_from("<I", buf, at)
        md[key], at = value(kind, at + 4)
    return md


def read_gguf(path):
    md = _metadata(path)
    return {
        "tokens": md.get("tokenizer.ggml.tokens"),
        "types": md.get("tokenizer.ggml.token_type"),
        "scores": md.get("tokenizer.ggml.scores"),
        "merges": md.get("tokenizer.ggml.merges"),
        "bos": md.get("tokenizer.ggml.bos_token_id"),
    }


def added(content, id_, special=True, **flags):
    t = {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": special}
    t.update(flags)
    return t


def bpe(vocab, merges, **options):
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False}
    model.update(options)
    model["vocab"] = vocab
    model["merges"] = merges
    return model


def template(bos_token, bos_id):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos_token, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos_token, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos_token, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos_token: {"id": bos_token, "ids": [bos_id], "tokens": [bos_token]}}}


def split_merge(line, vocab):
    """A GGUF merge line "a b" as [a, b] (a token may itself hold a space)."""
    parts = line.split(" ")
    if len(parts) == 2:
        return parts
    for i in range(1, len(parts)):
        a, b = " ".join(parts[:i]), " ".join(parts[i:])
        if a in vocab and b in vocab and a + b in vocab:
            return [a, b]
    raise ValueError(f"merge {line!r} splits no way into two tokens")


def byte_level_file(g, pre_tokenizer, normalizer=None, bos=False, ignore_merges=False):
    vocab, added_tokens = {}, []
    # Control and user-defined tokens are added tokens; those among the
    # ordinary ones' ids (GPT-2's, StarCoder's) are in the vocabulary too,
    # those after it (Llama 3's, Qwen's) only added, as published files have them.
    last_ordinary = max(i for i, ty in enumerate(g["types"]) if ty not in (3, 4, 5))
    for i, (t, ty) in enumerate(zip(g["tokens"], g["types"])):
        if ty in (3, 4):
            added_tokens.append(added(t, i, special=ty == 3))
        if ty != 5 and (ty not in (3, 4) or i < last_ordinary):  # 5: unused padding ids
            vocab[t] = i
    merges = [split_merge(m, vocab) for m in g["merges"]]
    post = byte_level(False)
    if bos:
        bos_token = g["tokens"][g["bos"]]
        post = {"type": "Sequence", "processors": [byte_level(False), template(bos_token, g["bos"])]}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post,
            "decoder": byte_level(True), "model": bpe(vocab, merges, ignore_merges=ignore_merges)}


def spm_merges(g, vocab):
    """Merges from SentencePiece scores, ranked as transformers ranks them
    (a piece's splits into two pieces, by the piece's score, higher first)."""
    if g["merges"]:
        return [split_merge(m, vocab) for m in g["merges"]]
    merges = []
    for piece, score in zip(g["tokens"], g["scores"]):
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2], reverse=True)
    return [[a, b] for a, b, _ in merges]


def spm_file(g, style):
    vocab, added_tokens = {}, []
    for i, (t, ty) in enumerate(zip(g["tokens"], g["types"])):
        vocab.setdefault(t, i)
        if ty in (2, 3, 4):  # unknown, control, user-defined
            added_tokens.append(added(t, i, special=ty != 4))
    unk = g["tokens"][[i for i, ty in enumerate(g["types"]) if ty == 2][0]] if 2 in list(g["types"]) else None
    model = bpe(vocab, spm_merges(g, vocab), unk_token=unk, fuse_unk=True, byte_fallback=True)
    legacy_decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    f = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens, "model": model}
    bos_token = g["tokens"][g["bos"]]
    if style == "legacy":
        f["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        f["pre_tokenizer"] = None
        f["decoder"] = legacy_decoder
        f["post_processor"] = template(bos_token, g["bos"])
    elif style == "metaspace":
        f["normalizer"] = None
        f["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
        f["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
        f["post_processor"] = template(bos_token, g["bos"])
    elif style == "gemma":
        f["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
        f["pre_tokenizer"] = None
        f["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}]}
        f["post_processor"] = template(bos_token, g["bos"])
    return f


def with_flags(f):
    """Qwen 2 with every added-token rule in play on tokens the corpus holds
    (special.txt): lstrip, rstrip, single_word, a non-special token (matched
    even with special tokens as text), and a normalized one ("naïve", matched
    after NFC, so also in its decomposed spelling)."""
    for t in f["added_tokens"]:
        if t["content"] == "<|endoftext|>":
            t["lstrip"] = True
        elif t["content"] == "<|fim_prefix|>":
            t["rstrip"] = True
        elif t["content"] == "<|fim_middle|>":
            t["single_word"] = True
        elif t["content"] == "<|fim_suffix|>":
            t["special"] = False
    f["added_tokens"].append(added("naïve", max(t["id"] for t in f["added_tokens"]) + 1, special=False,
                                   normalized=True))
    return f


FAMILIES = {
    "gpt-2": ("gpt-2", lambda g: byte_level_file(g, byte_level(True))),
    "llama3": ("llama-bpe", lambda g: byte_level_file(
        g, {"type": "Sequence", "pretokenizers": [split(LLAMA3), byte_level(False)]}, bos=True, ignore_merges=True)),
    "qwen2": ("qwen2", lambda g: byte_level_file(
        g, {"type": "Sequence", "pretokenizers": [split(QWEN2), byte_level(False)]}, normalizer={"type": "NFC"})),
    "qwen2-flags": ("qwen2", lambda g: with_flags(byte_level_file(
        g, {"type": "Sequence", "pretokenizers": [split(QWEN2), byte_level(False)]}, normalizer={"type": "NFC"}))),
    "qwen35": ("qwen35", lambda g: byte_level_file(
        g, {"type": "Sequence", "pretokenizers": [split(QWEN35), byte_level(False)]})),
    "deepseek-llm": ("deepseek-llm", lambda g: byte_level_file(
        g, {"type": "Sequence", "pretokenizers": [split(r) for r in DEEPSEEK_LLM] + [byte_level(False)]},
        bos=True)),
    "deepseek-coder": ("deepseek-coder", lambda g: byte_level_file(
        g, {"type": "Sequence", "pretokenizers": [split(r) for r in DEEPSEEK_CODER] + [byte_level(False)]},
        bos=True)),
    "starcoder": ("starcoder", lambda g: byte_level_file(
        g, {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                  byte_level(True)]})),
    "llama2": ("llama-spm", lambda g: spm_file(g, "legacy")),
    "phi3": ("phi-3", lambda g: spm_file(g, "legacy")),
    "mistral": ("llama-spm", lambda g: spm_file(g, "metaspace")),
    "gemma": ("gemma-4", lambda g: spm_file(g, "gemma")),
}


def cache_dir(models_dir):
    """Where built files are kept: beside llama.cpp's tree, under this
    builder's hash, so a rerun does not rebuild them and a changed builder
    does not reuse them."""
    with open(os.path.abspath(__file__), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    return os.path.join(models_dir, "..", "..", f"hf-json-{digest}")


def build(family, models_dir):
    """Writes cache_dir(MODELS_DIR)/FAMILY/tokenizer.json once; returns its
    path and the GGUF vocabulary's name."""
    vocab_name, builder = FAMILIES[family]
    path = os.path.join(cache_dir(models_dir), family, "tokenizer.json")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = builder(read_gguf(os.path.join(models_dir, f"ggml-vocab-{vocab_name}.gguf")))
        tmp = f"{path}.{os.getpid()}.tmp"  # tests that share the cache may build a file at once
        with open(tmp, "w") as out:
            json.dump(f, out, ensure_ascii=False)
        os.replace(tmp, path)
    return path, vocab_name
