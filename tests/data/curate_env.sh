#!/usr/bin/env bash
# The PyPI oracles of `claw curate`'s tests and benchmarks, pinned, in a venv
# under /tmp (made once): datatrove (heuristic filters, MinHash), datasketch
# (MinHash LSH), fastText's Python binding (language ID). Prints the venv's
# python.
set -euo pipefail
venv=${CLAW_CURATE_VENV:-/tmp/claw-curate-venv}
if ! "$venv/bin/python" -c 'import datatrove, datasketch, fasttext' 2>/dev/null; then
  /usr/bin/python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q datatrove==0.10.1 datasketch==2.0.0 fasttext-wheel==0.9.2 >&2
fi
echo "$venv/bin/python"
