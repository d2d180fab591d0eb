#!/usr/bin/env bash
# claw generate against transformers' generate(): a random GPT-2 and Llama
# (GQA) model that transformers creates and saves, loaded by claw from the
# directory as it is; 64 greedy tokens equal, token for token.
#
#   hf_generate.sh CLAW_BINARY gpt2|llama
#
# transformers comes from tools/hf_env.sh (a venv under /tmp over Debian's torch).
. "$(dirname "$0")/../../lib.sh"
set -e
claw=$1
family=$2
py=$("$here/../../oracle_env.sh" hf)

"$py" "$here/hf_generate.py" make "$family" "$tmp/hf"
prompt=17,250,3,999,42,7,512,88,1,640
"$py" "$here/hf_generate.py" generate "$tmp/hf" 64 "$prompt" >"$tmp/hf.json"
"$claw" generate --model "$tmp/hf" --prompt-tokens "$prompt" --max-tokens 64 --ignore-eos --output-format json \
  --num-threads 2 >"$tmp/claw.json" 2>"$tmp/claw.log" || { cat "$tmp/claw.log"; exit 1; }
/usr/bin/python3 - "$tmp/hf.json" "$tmp/claw.json" <<'PY'
import json, sys
hf, claw = (json.load(open(p)) for p in sys.argv[1:3])
assert len(hf["tokens"]) == 64, hf
first_diff = next((i for i, (a, b) in enumerate(zip(hf["tokens"], claw["tokens"])) if a != b), None)
assert claw["tokens"] == hf["tokens"], (
    f"claw differs from transformers at token {first_diff}: claw {claw['tokens']}\nhf {hf['tokens']}\n"
    f"logit gap there {hf['gaps'][first_diff] if first_diff is not None else None}")
print(f"64 greedy tokens equal; smallest top-1/top-2 logit gap {min(hf['gaps']):.4f}")
PY
