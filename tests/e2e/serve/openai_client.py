"""`claw serve` driven by the official `openai` Python SDK (tests/e2e/serve/openai_client.sh).

    openai_client.py BASE_URL API_KEY MODEL [CLAW_BINARY CHECKPOINT]

With the binary and the served checkpoint, `claw generate` gives the token
ids of a greedy continuation, sent back as a prompt to be scored (echo).
"""
import concurrent.futures as cf
import json
import subprocess
import sys
import urllib.error
import urllib.request

import openai

base, key, model = sys.argv[1:4]
claw_bin, checkpoint = (sys.argv[4:6] + [None, None])[:2]
client = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0)
prompt = "Fellow citizens of the Senate and of the House of Representatives,"


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what.split("\n")[0])


# /v1/models
models = client.models.list()
check([m.id for m in models.data] == [model], f"models lists {model}")

# Completions: text, usage, finish reason; greedy is deterministic.
c = client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0)
check(len(c.choices) == 1 and c.choices[0].text and c.choices[0].finish_reason == "length", "completion text")
check(c.usage.completion_tokens == 12 and c.usage.prompt_tokens > 5 and
      c.usage.total_tokens == c.usage.prompt_tokens + 12, "completion usage")
again = client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0)
check(again.choices[0].text == c.choices[0].text, "greedy completions repeat")

# logprobs: the chosen token leads its alternatives (greedy).
lp = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0, logprobs=3)
L = lp.choices[0].logprobs
check(len(L.tokens) == 6 and len(L.token_logprobs) == 6 and all(len(t) == 3 for t in L.top_logprobs),
      "completion logprobs shape")
check(all(max(top.values()) == tl for top, tl in zip(L.top_logprobs, L.token_logprobs)), "greedy token is the top one")
check("".join(L.tokens) == lp.choices[0].text and L.text_offset[0] == 0, "logprob tokens spell the text")

# echo
e = client.completions.create(model=model, prompt=prompt, max_tokens=4, temperature=0, echo=True)
check(e.choices[0].text.startswith(prompt) and len(e.choices[0].text) > len(prompt), "echo prepends the prompt")

# echo with logprobs scores the prompt: the first token null, then each prompt
# token given those before it.
scored = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0, echo=True, logprobs=0)
P = scored.choices[0].logprobs
n_prompt = scored.usage.prompt_tokens
check(len(P.tokens) == n_prompt + 1 and P.token_logprobs[0] is None and P.top_logprobs[0] is None and
      all(x is not None and x <= 0 for x in P.token_logprobs[1:]), "echo + logprobs scores every prompt token")
check("".join(P.tokens[:n_prompt]) == prompt and P.text_offset[:2] == [0, len(P.tokens[0])],
      "prompt logprob tokens spell the prompt")
if claw_bin:
    # The greedy continuation's token ids (the same engine, from the CLI),
    # sent back after the prompt's: scored exactly as it was generated (lp
    # above), streamed or not.
    g = json.loads(subprocess.run([claw_bin, "generate", "-m", checkpoint, "-p", prompt, "-n", "6", "--num-threads",
                                   "1", "--output-format", "json"], check=True, capture_output=True, text=True).stdout)
    check(g["text"] == lp.choices[0].text and len(g["prompt_tokens"]) == n_prompt, "claw generate agrees with the server")
    for stream in (False, True):
        args = dict(model=model, prompt=g["prompt_tokens"] + g["tokens"], max_tokens=1, temperature=0, echo=True,
                    logprobs=3)
        if stream:
            got = [ch for ch in client.completions.create(stream=True, **args) if ch.choices]
            G = got[0].choices[0].logprobs
            check(got[0].choices[0].text == prompt + lp.choices[0].text,
                  "the streamed echo comes first, with the prompt's logprobs")
        else:
            G = client.completions.create(**args).choices[0].logprobs
        tail = G.token_logprobs[n_prompt:n_prompt + 6]
        check(G.tokens[n_prompt:n_prompt + 6] == L.tokens and tail == L.token_logprobs and
              G.top_logprobs[n_prompt:n_prompt + 6] == L.top_logprobs,
              f"the continuation scored as a prompt equals its generation (stream={stream}): {tail} vs "
              f"{L.token_logprobs}")

# n > 1 with a seed: distinct samples, reproducible as a whole.
s1 = client.completions.create(model=model, prompt=prompt, max_tokens=10, temperature=1.0, n=3, seed=11)
s2 = client.completions.create(model=model, prompt=prompt, max_tokens=10, temperature=1.0, n=3, seed=11)
texts = [ch.text for ch in s1.choices]
check(sorted(ch.index for ch in s1.choices) == [0, 1, 2], "n=3 gives three choices")
check(texts == [ch.text for ch in s2.choices], "seeded n=3 is reproducible")
check(len(set(texts)) > 1, f"n=3 samples differ: {texts}")

# stop: the text ends before the stop string (a sampled text, seeded: choice
# 0 of a request with seed 11 is what a one-choice request with seed 11 gives).
sampled = texts[0]
stop = sampled[len(sampled) // 2:len(sampled) // 2 + 3]
st = client.completions.create(model=model, prompt=prompt, max_tokens=10, temperature=1.0, seed=11, stop=[stop, "zzzz"])
check(st.choices[0].text == sampled[:sampled.index(stop)] and st.choices[0].finish_reason == "stop",
      f"stop {stop!r}: {st.choices[0].text!r} from {sampled!r}")
full = c.choices[0].text

# Streaming with usage.
chunks = list(client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0, stream=True,
                                        stream_options={"include_usage": True}))
streamed = "".join(ch.choices[0].text for ch in chunks if ch.choices)
check(streamed == full, f"streamed completion equals the plain one: {streamed!r} vs {full!r}")
check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12 and not chunks[-1].choices,
      "the last chunk carries usage")

# n > 1 streamed: each choice spells what the plain request gave it, and the
# choices' chunks interleave as they are generated (the 64-token request: the
# first chunk of choice 2 comes long before the last of choice 0).
by = {}
for ch in client.completions.create(model=model, prompt=prompt, max_tokens=10, temperature=1.0, n=3, seed=11,
                                    stream=True):
    for x in ch.choices:
        by[x.index] = by.get(x.index, "") + x.text
check([by.get(i) for i in range(3)] == texts, "streamed n=3 equals the plain n=3")
order = [x.index for ch in client.completions.create(model=model, prompt=prompt, max_tokens=64, temperature=1.0, n=3,
                                                     seed=5, stream=True, extra_body={"ignore_eos": True})
         for x in ch.choices]
check(sorted(set(order)) == [0, 1, 2] and order.index(2) < len(order) - 1 - order[::-1].index(0),
      "streamed choices interleave")

# Chat: plain and streamed, with logprobs.
msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something."}]
ch = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0, logprobs=True,
                                    top_logprobs=2)
m = ch.choices[0]
check(m.message.role == "assistant" and isinstance(m.message.content, str), "chat message")
check(len(m.logprobs.content) == ch.usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in m.logprobs.content),
      "chat logprobs per token")
parts = list(client.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
check(parts[0].choices[0].delta.role == "assistant", "first chat chunk has the role")
text = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
check(text == m.message.content, f"streamed chat equals the plain one: {text!r} vs {m.message.content!r}")
check(parts[-1].usage.completion_tokens == ch.usage.completion_tokens, "chat stream usage")

# A seeded request alone and among 15 concurrent others: the same tokens
# and log-probabilities, to the last bit as JSON prints them.
def probe():
    r = client.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0.8, seed=1234, logprobs=2)
    return r.choices[0].text, r.choices[0].logprobs.token_logprobs, r.choices[0].logprobs.top_logprobs

alone = probe()
with cf.ThreadPoolExecutor(16) as pool:
    others = [pool.submit(client.completions.create, model=model, prompt=prompt[: 10 + 3 * i] + " we", max_tokens=8 + i,
                          temperature=0.7, seed=i) for i in range(15)]
    loaded = pool.submit(probe)
    for f in others:
        f.result()
    check(loaded.result() == alone, "a seeded request is bitwise the same among 15 concurrent others")

# Errors, each with OpenAI's JSON and status.
def expect(exc, what, **kw):
    try:
        client.completions.create(**kw)
    except exc as err:
        body = err.response.json()
        check("error" in body and body["error"]["message"], f"{what}: {err.status_code} {body['error']['message'][:60]}")
        return body["error"]
    raise AssertionError(f"{what}: no error")

e = expect(openai.BadRequestError, "temperature out of range", model=model, prompt="x", temperature=3)
check(e["param"] == "temperature", "the error names temperature")
expect(openai.NotFoundError, "unknown model", model="no-such-model", prompt="x")
e = expect(openai.BadRequestError, "prompt longer than the context", model=model, prompt="the " * 2000)
check(e["param"] == "prompt", "the error names prompt")
e = expect(openai.BadRequestError, "bad n", model=model, prompt="x", n=0)
check(e["param"] == "n", "the error names n")
bad = openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0)
try:
    bad.models.list()
    raise AssertionError("a wrong key was accepted")
except openai.AuthenticationError as err:
    check(err.status_code == 401 and err.response.json()["error"]["code"] == "invalid_api_key", "wrong key: 401")
# /health needs no key; an oversized body gets 413 with an error JSON.
check(urllib.request.urlopen(base + "/health").status == 200, "health 200 without a key")
req = urllib.request.Request(base + "/v1/completions", data=b"{" + b" " * (9 << 20) + b"}",
                             headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
try:
    urllib.request.urlopen(req)
    raise AssertionError("an oversized body was accepted")
except urllib.error.HTTPError as err:
    check(err.code == 413 and "error" in json.loads(err.read()), "oversized body: 413")
except (ConnectionResetError, BrokenPipeError, urllib.error.URLError):
    print("ok: oversized body: connection closed by the server")

# Metrics: Prometheus text; nothing left holding KV blocks.
req = urllib.request.Request(base + "/metrics", headers={"Authorization": "Bearer " + key})
metrics = urllib.request.urlopen(req).read().decode()
values = {l.split()[0]: float(l.split()[1]) for l in metrics.splitlines() if l and not l.startswith("#")}
check(values["claw:kv_blocks_used"] == 0 and values["claw:num_requests_running"] == 0, "KV blocks all returned")
check(values["claw:generation_tokens_total"] > 100 and values["claw:time_to_first_token_seconds_count"] > 10,
      "token counters and latency histograms")
print("openai client: all checks passed")
