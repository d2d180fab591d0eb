"""Token ids of claw's GGUF vocabularies (ckpt/gguf_tokenizer.h) against the
tokenizers library (PyPI, Rust), which transformers builds from the same
GGUF file offline, on the 5 MB slice of the oracle corpus that
hf_vs_tokenizers.py uses (make_corpus.cjs: multilingual text in Latin,
Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai, CJK and emoji, whitespace
runs, fuzz lines, special tokens, then C++/Python code and English prose),
each line with its newline.

    python gguf_vs_tokenizers.py --driver gguf_vocab_driver --models DIR --corpus DIR VOCAB...

VOCAB: llama-bpe, qwen2, gpt-2 (models/ggml-vocab-VOCAB.gguf). Prints per
vocabulary the lines and tokens compared, the lines that differ (the first
few shown) and each side's encoding time; fails on any difference.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_vs_tokenizers import corpus_lines  # noqa: E402  (the 5 MB slice)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("vocabs", nargs="+")
    a = ap.parse_args()
    from transformers import AutoTokenizer
    lines, nbytes = corpus_lines(a.corpus)
    print(f"corpus: {len(lines)} lines, {nbytes / 1e6:.1f} MB of valid UTF-8 from {a.corpus}")
    failed = False
    with tempfile.TemporaryDirectory() as work:
        texts = os.path.join(work, "texts.jsonl")
        with open(texts, "w") as f:
            for t in lines:
                f.write(json.dumps(t) + "\n")
        for vocab in a.vocabs:
            name = f"ggml-vocab-{vocab}.gguf"
            tok = AutoTokenizer.from_pretrained(a.models, gguf_file=name)
            t0 = time.time()
            ref = tok(lines, add_special_tokens=False)["input_ids"]
            t_ref = time.time() - t0
            t0 = time.time()
            out = subprocess.run([a.driver, os.path.join(a.models, name), "--encode", texts], capture_output=True,
                                 text=True)
            t_claw = time.time() - t0
            if out.returncode != 0:
                print(f"FAIL {vocab}: driver exit {out.returncode}: {out.stderr[-500:]}")
                failed = True
                continue
            mine = out.stdout.split("\n")
            bad, tokens = 0, 0
            for i, (text, r) in enumerate(zip(lines, ref)):
                tokens += len(r)
                got = [int(x) for x in mine[i].split()]
                if got != r:
                    bad += 1
                    if bad <= 3:
                        print(f"  {vocab} line {i} {text[:80]!r}: tokenizers {r[:20]} claw {got[:20]}")
            print(f"{vocab}: {len(lines)} lines, {tokens} tokens; {bad} lines differ; tokenizers {t_ref:.1f} s "
                  f"(batch, its threads), claw {t_claw:.1f} s (one thread, with start-up and printing)")
            failed |= bad > 0
    print("FAIL" if failed else "PASS")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
