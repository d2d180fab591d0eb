"""Writes a byte-level tokenizer.json: GPT-2's byte-to-character table as a
BPE vocabulary of 256 ids and no merges (every byte its own token), with
<|endoftext|> as id 256. The parity tests train on the built-in corpus in
these ids (models.sh): an output layer of 257 columns (384 padded) instead
of GPT-2's 50,257, which is 95% of a tiny model's step.

    python3 byte_tokenizer.py OUT.json
"""
import json
import sys


def byte_chars():
    """GPT-2's table: printable bytes stand for themselves, the others for 256 + n."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {b: b for b in printable}, 0
    for b in range(256):
        if b not in table:
            table[b] = 256 + extra
            extra += 1
    return {b: chr(c) for b, c in table.items()}


def main():
    vocab = {ch: b for b, ch in byte_chars().items()}
    vocab["<|endoftext|>"] = 256
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    with open(sys.argv[1], "w") as f:
        json.dump(tokenizer, f)


if __name__ == "__main__":
    main()
