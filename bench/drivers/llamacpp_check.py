"""Does llama.cpp (PyPI llama-cpp-python) load the GGUF files claw exports,
and give claw's greedy tokens? For a random GPT-2 and a random Llama (GQA)
that transformers made (wide initialisation, so the greedy choice has
margins; tests/e2e/serve/hf_generate.py), imported into claw and exported at
f32, q8_0 and q4_0: 64 greedy tokens from llama.cpp against `claw generate`
on the same file. At f32 they must be equal; at q8_0/q4_0 the two engines
quantize activations differently (llama.cpp: q8 blocks with f16 scales; claw:
fp32 scales), so the count of equal leading tokens is reported.

    /tmp/claw-llamacpp-venv/bin/python bench/drivers/llamacpp_check.py --claw build/bin/claw
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = [17, 250, 3, 999, 42, 7, 512, 88, 1, 640]


def llama_tokens(path, n):
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=256, n_threads=os.cpu_count(), verbose=False)
    out = []
    for t in llm.generate(PROMPT, top_k=1, top_p=1.0, temp=0.0, reset=True):
        out.append(t)
        if len(out) == n:
            break
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--claw", default="build/bin/claw")
    ap.add_argument("--hf-python", default="/tmp/claw-hf-venv/bin/python")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in ("gpt2", "llama"):
            hf = os.path.join(tmp, family)
            subprocess.run([a.hf_python, os.path.join(HERE, "..", "..", "tests", "serve", "hf_generate.py"), "make", family,
                            hf], check=True, capture_output=True)
            ck = os.path.join(tmp, family + "-ck")
            subprocess.run([a.claw, "ckpt", "import", "--input", hf, "--save", ck], check=True, capture_output=True)
            for t in ("f32", "q8_0", "q4_0"):
                g = os.path.join(tmp, f"{family}-{t}.gguf")
                subprocess.run([a.claw, "ckpt", "export", "--load", ck, "--format", "gguf", "--type", t, "--output", g],
                               check=True, capture_output=True)
                out = subprocess.run([a.claw, "generate", "--model", g, "--prompt-tokens", ",".join(map(str, PROMPT)),
                                      "--max-tokens", "64", "--ignore-eos", "--output-format", "json"],
                                     check=True, capture_output=True, text=True).stdout
                ours = json.loads(out)["tokens"]
                theirs = llama_tokens(g, 64)
                same = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), 64)
                rows.append((family, t, same))
                print(f"{family} {t}: llama.cpp loads claw's GGUF; {same}/64 leading greedy tokens equal to claw's",
                      flush=True)
                if t == "f32" and same != 64:
                    sys.exit(f"FAIL: {family} f32 differs at token {same}: claw {ours} llama.cpp {theirs}")
    print("| model | type | greedy tokens equal to claw's (of 64) |\n|---|---|---:|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    main()
