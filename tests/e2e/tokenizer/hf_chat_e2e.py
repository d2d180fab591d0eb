"""A model directory as the Hub ships one, and what transformers makes of
its chats (the oracle of hf_chat_e2e.sh).

    hf_chat_e2e.py make FAMILY DIR MODELS TEMPLATES
        DIR: a random model of FAMILY (save_pretrained) with its
        tokenizer.json (hf_json_from_gguf.py) and a tokenizer_config.json
        holding the family's real chat template, bos_token and eos_token:
          llama3  LlamaForCausalLM, Llama 3's vocabulary, Llama 3.1
                  Instruct's template
          qwen2   Qwen2ForCausalLM, Qwen 2's vocabulary, Qwen 2.5
                  Instruct's template
    hf_chat_e2e.py expect DIR OUT.json
        the conversations (CONVERSATIONS) and, per conversation, the prompt ids
        of apply_chat_template(add_generation_prompt=True); for those that end
        with a reply, the ids of the whole conversation and the mask of the
        tokens an SFT loss learns: each assistant turn, from where
        apply_chat_template(turns before it, add_generation_prompt=True) ends
        to where the text through it ends, by the tokens' character offsets
        (the templates have no {% generation %} blocks for
        return_assistant_tokens_mask)
    hf_chat_e2e.py roundtrip OUT.json EXPORTED_DIR
        after claw ckpt import and export --format hf: transformers renders
        the same prompt ids from the exported directory
    hf_chat_e2e.py check OUT.json TOKENIZE.txt SERVE.jsonl SFT_PREFIX
        claw's results against them: `claw tokenize --chat` ids, `claw serve`
        prompt_token_ids, `claw preprocess --sft` tokens and loss masks
"""
import json
import os
import shutil
import sys

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a prime."}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3? Ответь по-русски, 请。"}],
    [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Colour of the sky?"},
     {"role": "assistant", "content": "Blue."}],
    [{"role": "user", "content": "Write a haiku\nabout rain."},
     {"role": "assistant", "content": "Soft rain on the roof\n  drums a slow, grey lullaby —\nthe gutters answer."},
     {"role": "user", "content": "Now one about snow 🌨️."},
     {"role": "assistant", "content": "Snow hushes the street;\nevery footprint a question\nthe morning erases."}],
]

FAMILIES = {
    "llama3": {"json": "llama3", "template": "meta-llama-Llama-3.1-8B-Instruct.jinja", "vocab_size": 128256,
               "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "qwen2": {"json": "qwen2", "template": "Qwen-Qwen2.5-7B-Instruct.jinja", "vocab_size": 151936,
              "bos_token": None, "eos_token": "<|im_end|>"},
}


def make(family, out, models, templates):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import hf_json_from_gguf
    import torch
    import transformers as tf
    f = FAMILIES[family]
    path, _ = hf_json_from_gguf.build(f["json"], models)
    os.makedirs(out, exist_ok=True)
    shutil.copy(path, os.path.join(out, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": f["bos_token"], "eos_token": f["eos_token"],
              "model_max_length": 131072, "clean_up_tokenization_spaces": False,
              "chat_template": open(os.path.join(templates, f["template"])).read()}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as o:
        json.dump(config, o, ensure_ascii=False, indent=2)
    torch.manual_seed(0)
    shape = dict(vocab_size=f["vocab_size"], max_position_embeddings=512, hidden_size=32, intermediate_size=64,
                 num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5)
    if family == "qwen2":  # Qwen 2.5's small models tie their embeddings
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**shape, tie_word_embeddings=True, use_sliding_window=False))
    else:
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**shape, tie_word_embeddings=False))
    model.save_pretrained(out, safe_serialization=True)


def expect(d, out):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d)
    render = lambda msgs, gen: tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)  # noqa: E731
    cases = []
    for conv in CONVERSATIONS:
        case = {"messages": conv, "prompt_ids": tok.apply_chat_template(conv, add_generation_prompt=True)}
        if conv[-1]["role"] == "assistant":
            full = render(conv, False)
            spans = []
            for i, m in enumerate(conv):
                if m["role"] == "assistant":
                    prompt, through = render(conv[:i], True), render(conv[:i + 1], False)
                    assert through.startswith(prompt) and full.startswith(through), "turns do not extend each other"
                    spans.append((len(prompt), len(through)))
            enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
            case["ids"] = enc["input_ids"]
            case["mask"] = [int(any(b <= start < e for b, e in spans)) for start, _ in enc["offset_mapping"]]
        cases.append(case)
    json.dump({"eod": tok.convert_tokens_to_ids(tok.eos_token), "cases": cases}, open(out, "w"), ensure_ascii=False)


def roundtrip(expected, exported):
    """The directory claw ckpt import + export --format hf wrote: transformers
    reads its tokenizer and template and renders the same prompt ids."""
    from transformers import AutoTokenizer, GenerationConfig
    doc = json.load(open(expected))
    tok = AutoTokenizer.from_pretrained(exported)
    bad = sum(tok.apply_chat_template(c["messages"], add_generation_prompt=True) != c["prompt_ids"]
              for c in doc["cases"])
    eos = GenerationConfig.from_pretrained(exported).eos_token_id
    if eos != doc["eod"]:
        bad += 1
        print(f"generation_config.json eos_token_id {eos}, the tokenizer's {doc['eod']}")
    print(f"exported directory: {len(doc['cases'])} conversations, {bad} differences from the original")
    sys.exit(1 if bad else 0)


def check(expected, tokenize_out, serve_out, sft_prefix):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
    from megatron_format import MegatronReader
    doc = json.load(open(expected))
    cases, eod = doc["cases"], doc["eod"]
    tokenized = [[int(x) for x in line.split()] for line in open(tokenize_out).read().splitlines()]
    served = [json.loads(line)["prompt_token_ids"] for line in open(serve_out).read().splitlines()]
    bad = 0
    for i, case in enumerate(cases):
        for name, got in (("claw tokenize --chat", tokenized[i]), ("claw serve prompt_token_ids", served[i])):
            if got != case["prompt_ids"]:
                bad += 1
                print(f"conversation {i}: {name}\n  claw         {got}\n  transformers {case['prompt_ids']}")
    tokens, masks = MegatronReader(sft_prefix), MegatronReader(sft_prefix + "_loss_mask")
    sft = [c for c in cases if "ids" in c]
    if tokens.document_count - 1 != len(sft):
        print(f"claw preprocess --sft wrote {tokens.document_count - 1} documents for {len(sft)} conversations")
        bad += 1
    learned = 0
    for d, case in enumerate(sft):
        got_ids = [int(x) for s in tokens.document(d) for x in s]
        got_mask = [int(x) for s in masks.document(d) for x in s]
        want_ids, want_mask = case["ids"] + [eod], case["mask"] + [1]
        learned += sum(want_mask)
        if got_ids != want_ids or got_mask != want_mask:
            bad += 1
            print(f"SFT conversation {d}:\n  claw ids  {got_ids}\n  want      {want_ids}\n"
                  f"  claw mask {got_mask}\n  want      {want_mask}")
    print(f"{len(cases)} conversations: prompt ids of claw tokenize --chat and claw serve equal to "
          f"apply_chat_template's; {len(sft)} SFT conversations: tokens and loss masks ({learned} learned) equal; "
          f"{bad} differences")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(*sys.argv[2:6])
    elif cmd == "expect":
        expect(*sys.argv[2:4])
    elif cmd == "roundtrip":
        roundtrip(*sys.argv[2:4])
    elif cmd == "check":
        check(*sys.argv[2:6])
    else:
        sys.exit(f"unknown command {cmd}")
