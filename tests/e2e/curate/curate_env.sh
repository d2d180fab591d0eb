#!/usr/bin/env bash
# The PyPI oracles of `claw curate`'s tests and benchmarks, pinned, in a venv
# under /tmp (made once): datatrove (heuristic filters, MinHash), datasketch
# (MinHash LSH), fastText's Python binding (language ID), spaCy (datatrove's
# English word tokenizer; xxhash 3, regex and tokenizers for datatrove's
# MinHash in bench/drivers/bench_curate.py). Prints the venv's python.
set -euo pipefail
venv=${CLAW_CURATE_VENV:-/tmp/claw-curate-venv}
if ! "$venv/bin/python" -c 'import datatrove, datasketch, fasttext, fasteners, orjson, spacy' 2>/dev/null; then
  /usr/bin/python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q datatrove==0.10.1 datasketch==2.0.0 fasttext-numpy2-wheel==0.9.2 fasteners==0.20 \
    orjson==3.13.0 spacy==3.8.18 \
    xxhash==3.8.2 regex==2026.11.19 tokenizers==0.23.3 >&2
fi
echo "$venv/bin/python"
