"""claw's Jinja interpreter (src/claw/data/jinja.h) against transformers'
rendering of chat templates (jinja2, with transformers' environment:
trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception and
strftime_now), on llama.cpp's collection of real templates
(tools/llamacpp_sdist.sh: vendor/llama.cpp/models/templates/*.jinja).

    python chat_templates.py --driver build/bin/jinja_render_driver --templates DIR [--only NAME]

Each template renders eight conversations (user alone; with a system
message; multi-turn; multi-turn with system; a tool call with its result and
the tools listed), each with and without add_generation_prompt. A case
agrees when both render the same bytes or both refuse (the template raises).
Printed: per template, agreed cases and the first difference; the count of
templates that agree everywhere; the constructs the others lack. Fails when
a template of the required families disagrees anywhere.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

REQUIRED = [
    "meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "meta-llama-Llama-3.3-70B-Instruct",
    "Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "mistralai-Mistral-Nemo-Instruct-2407", "google-gemma-2-2b-it",
    "microsoft-Phi-3.5-mini-instruct", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
]

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}},
                   "required": ["city"]}}}]


def conversations():
    user = {"role": "user", "content": "What is the capital of France?"}
    system = {"role": "system", "content": "You are terse."}
    reply = {"role": "assistant", "content": "Paris."}
    again = {"role": "user", "content": "And of Italy?"}
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
    result = {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "22 C, sunny"}
    weather = {"role": "user", "content": "Weather in Paris?"}
    cases = {
        "user": ([user], None),
        "system": ([system, user], None),
        "multi": ([user, reply, again], None),
        "multi_system": ([system, user, reply, again], None),
        "tools": ([weather, call, result], TOOLS),
    }
    out = []
    for name, (messages, tools) in cases.items():
        for gen in (True, False):
            ctx = {"messages": messages, "add_generation_prompt": gen, "bos_token": "<s>", "eos_token": "</s>"}
            if tools:
                ctx["tools"] = tools
            out.append((f"{name}{'+gen' if gen else ''}", ctx))
    return out


def reference(template, ctx):
    from transformers.utils.chat_template_utils import _compile_jinja_template
    try:
        return {"text": _compile_jinja_template(template).render(**ctx)}
    except Exception as e:  # noqa: BLE001 - the template raised, or jinja2 refused it
        return {"error": f"{type(e).__name__}: {e}"}


def first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"at byte {i}: transformers {a[max(0, i - 30):i + 40]!r} / claw {b[max(0, i - 30):i + 40]!r}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--templates", required=True)
    ap.add_argument("--only")
    a = ap.parse_args()
    cases = conversations()
    paths = sorted(glob.glob(os.path.join(a.templates, "*.jinja")))
    if a.only:
        paths = [p for p in paths if a.only in p]
    agree_all, lacking, failed_required = [], {}, []
    with tempfile.TemporaryDirectory() as work:
        ctx_file = os.path.join(work, "contexts.jsonl")
        with open(ctx_file, "w") as f:
            for _, ctx in cases:
                f.write(json.dumps(ctx) + "\n")
        for path in paths:
            name = os.path.basename(path)[:-len(".jinja")]
            template = open(path, encoding="utf-8").read()
            out = subprocess.run([a.driver, path, ctx_file], capture_output=True, text=True)
            lines = [json.loads(x) for x in out.stdout.splitlines()]
            if out.returncode != 0 or not lines:
                lines = [{"error": f"driver exit {out.returncode}: {out.stderr[-300:]}"}]
            if len(lines) == 1 and len(cases) > 1:
                lines = lines * len(cases)  # the template did not parse: every case refused
            agreed, refused, notes = 0, 0, []
            for (case, ctx), mine in zip(cases, lines):
                ref = reference(template, ctx)
                if "error" in ref and "error" in mine:
                    agreed += 1
                    refused += 1
                elif ref.get("text") == mine.get("text") and "text" in ref:
                    agreed += 1
                elif "error" in mine:
                    notes.append(f"{case}: claw refused ({mine['error'][:160]})")
                elif "error" in ref:
                    notes.append(f"{case}: transformers raised ({ref['error'][:120]}), claw rendered")
                else:
                    notes.append(f"{case}: differs {first_difference(ref['text'], mine['text'])}")
            status = "agrees" if agreed == len(cases) else f"{agreed}/{len(cases)}"
            if refused:
                status += f" ({refused} refused by both)"
            print(f"{name}: {status}" + (f"; first: {notes[0]}" if notes else ""))
            if agreed == len(cases):
                agree_all.append(name)
            else:
                lacking[name] = notes[0]
                if name in REQUIRED:
                    failed_required.append(name)
    print(f"\n{len(agree_all)} of {len(paths)} templates render byte for byte as transformers does in all "
          f"{len(cases)} cases")
    if failed_required:
        print("FAIL: required templates that differ: " + ", ".join(failed_required))
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
