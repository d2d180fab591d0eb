"""claw's tokenizer.json reader (data/hf_tokenizer.h) against the tokenizers
library (PyPI, Rust) on the same files: those of hf_json_from_gguf.py, one
per family.

Per family: the file is first checked against llama.cpp's own cases for its
vocabulary (.inp/.out) with the library and with claw, then on a 5 MB slice
of the oracle corpus (make_corpus.cjs: all of multilingual.txt, fuzz.txt and
special.txt, then the first megabytes of code.txt and prose.txt; each line
with its newline) these must be identical, line by line:
  - encode(text, add_special_tokens=False), added tokens recognised;
  - the same with `encode_special_tokens = True` (special ones as text) and
    encode(text) with the post-processor (add_special_tokens=True), on the
    lines that hold special tokens (special.txt) and the first 2,000;
  - decode(ids, skip_special_tokens=False) of the library's ids.

    python hf_vs_tokenizers.py --driver hf_tokenizer_driver --models DIR --corpus DIR --work DIR FAMILY...

Prints per family the lines, tokens and differences (the first few shown)
and both sides' times; fails on any difference.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_json_from_gguf  # noqa: E402

# Files whose shape is not SentencePiece's on purpose: transformers' non-legacy
# Metaspace adds no prefix space to text that starts with one, where
# SentencePiece (and llama.cpp's cases) do; claw must still equal the library.
NOT_SENTENCEPIECE = {"mistral"}

SLICE_BYTES = {"multilingual.txt": None, "fuzz.txt": None, "special.txt": None, "code.txt": 1_100_000,
               "prose.txt": 1_100_000}


def corpus_lines(corpus_dir, with_sources=False):
    lines, total, sources = [], 0, []
    for name, limit in SLICE_BYTES.items():
        taken = 0
        for raw in open(os.path.join(corpus_dir, name), "rb").read().splitlines(keepends=True):
            if limit is not None and taken >= limit:
                break
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue  # the library takes str: invalid UTF-8 has no Python string
            lines.append(text)
            sources.append(name)
            taken += len(raw)
        total += taken
    return (lines, total, sources) if with_sources else (lines, total)


def llama_cpp_cases(tok, models, vocab):
    base = os.path.join(models, f"ggml-vocab-{vocab}.gguf")
    inp = open(base + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
    out = open(base + ".out").read().split("\n")
    tok.encode_special_tokens = True
    ok = sum(tok.encode(t, add_special_tokens=False).ids == [int(x) for x in out[i].split()] for i, t in enumerate(inp))
    tok.encode_special_tokens = False
    return ok, len(inp)


def compare(name, lines, ref, mine, show=3):
    bad = 0
    for i, (r, m) in enumerate(zip(ref, mine)):
        if r != m:
            bad += 1
            if bad <= show:
                print(f"    {name} line {i} {lines[i][:60]!r}:\n      tokenizers {str(r)[:160]}\n      claw       {str(m)[:160]}")
    if len(ref) != len(mine):
        print(f"    {name}: {len(ref)} results from the library, {len(mine)} from claw")
        bad += 1
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("families", nargs="+")
    a = ap.parse_args()
    from tokenizers import Tokenizer
    lines, nbytes, sources = corpus_lines(a.corpus, with_sources=True)
    print(f"corpus: {len(lines)} lines, {nbytes / 1e6:.2f} MB of valid UTF-8 ({', '.join(SLICE_BYTES)})")
    # Special tokens as text and the post-processor are compared on the
    # lines that hold special tokens (special.txt) and the first of the others.
    subset = [i for i, (t, source) in enumerate(zip(lines, sources)) if source == "special.txt" or i < 2000]
    texts = os.path.join(a.work, "texts.jsonl")
    with open(texts, "w") as f:
        for t in lines:
            f.write(json.dumps(t) + "\n")
    failed = False
    for family in a.families:
        path, vocab = hf_json_from_gguf.build(family, a.models)
        tok = Tokenizer.from_file(path)
        ok, n = llama_cpp_cases(tok, a.models, vocab)
        cases = subprocess.run([a.driver, path, "--cases", os.path.join(a.models, f"ggml-vocab-{vocab}.gguf.inp")],
                               capture_output=True, text=True)
        claw_cases = cases.stdout.strip().splitlines()[-1] if cases.stdout.strip() else cases.stderr.strip()
        print(f"{family} (ggml-vocab-{vocab}): llama.cpp cases: tokenizers {ok}/{n}; claw: {claw_cases}")
        if family not in NOT_SENTENCEPIECE and (ok != n or cases.returncode != 0):
            print(cases.stdout[-2000:])
            failed = True

        t0 = time.time()
        recognised = [e.ids for e in tok.encode_batch(lines, add_special_tokens=False)]
        sub = [lines[i] for i in subset]
        with_post = [e.ids for e in tok.encode_batch(sub, add_special_tokens=True)]
        tok.encode_special_tokens = True
        as_text = [e.ids for e in tok.encode_batch(sub, add_special_tokens=False)]
        tok.encode_special_tokens = False
        t_ref = time.time() - t0
        t0 = time.time()
        out = subprocess.run([a.driver, path, "--encode", texts], capture_output=True, text=True)
        t_claw = time.time() - t0
        if out.returncode != 0:
            print(f"FAIL {family}: driver exit {out.returncode}: {out.stderr[-800:]}")
            failed = True
            continue
        rows = [r.split("\t") for r in out.stdout.split("\n")[:len(lines)]]

        def ids(col, which=None):  # column col of the rows (of those in which), as lists of ids
            picked = rows if which is None else [rows[i] for i in which]
            return [[int(x) for x in r[col].split()] if len(r) > col else None for r in picked]
        bad = compare("encode", lines, recognised, ids(0))
        bad += compare("encode (special tokens as text)", sub, as_text, ids(1, subset))
        bad += compare("encode + post-processor", sub, with_post, ids(2, subset))

        t0 = time.time()
        decoded = tok.decode_batch(recognised, skip_special_tokens=False)
        t_ref_decode = time.time() - t0
        id_file = os.path.join(a.work, "ids.txt")
        with open(id_file, "w") as f:
            for r in recognised:
                f.write(" ".join(map(str, r)) + "\n")
        out = subprocess.run([a.driver, path, "--decode", id_file], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"FAIL {family}: driver --decode exit {out.returncode}: {out.stderr[-800:]}")
            failed = True
            continue
        mine = [json.loads(s) for s in out.stdout.split("\n")[:len(lines)]]
        bad += compare("decode", lines, decoded, mine)
        tokens = sum(map(len, recognised))
        round_trips = sum(d == t for d, t in zip(decoded, lines))
        print(f"  {len(lines)} lines, {tokens} tokens: {bad} differences; decode(encode(x)) == x for {round_trips} "
              f"lines; tokenizers {t_ref:.1f} s encode x3 (batch, its threads) + {t_ref_decode:.1f} s decode, "
              f"claw {t_claw:.1f} s encode x3 (one thread, with start-up and printing)")
        failed |= bad > 0
    print("FAIL" if failed else "PASS")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
