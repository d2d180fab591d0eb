#!/usr/bin/env bash
# Two processes mapping one dataset hold one physical copy: builds a dataset
# with `claw preprocess` (the State of the Union speeches, four times over),
# then runs dataset_shared_pages, which prints Rss/Pss of the .bin mapping
# for one process alone and for two at once.
#   shared_pages.sh CLAW_BINARY SHARED_PAGES_TOOL
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
tool=$2
data=${CLAW_DATA_DIR:?CLAW_DATA_DIR must name the built-in data directory}

/usr/bin/python3 - "$data/sotu" "$tmp/corpus.jsonl" <<'PY'
import json, pathlib, sys
speeches = sorted(pathlib.Path(sys.argv[1]).glob("*.txt"))
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for copy in range(4):
        for s in speeches:
            out.write(json.dumps({"text": s.read_text(encoding="utf-8")}) + "\n")
PY
"$claw" preprocess --input "$tmp/corpus.jsonl" --output-prefix "$tmp/sotu" --append-eod --workers 2 \
  --vocab-file "$data/gpt2/encoder.json" --merge-file "$data/gpt2/vocab.bpe" >/dev/null
"$tool" "$tmp/sotu_text_document"
