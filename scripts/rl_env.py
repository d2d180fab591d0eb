#!/usr/bin/env python3
"""A reference environment for `claw rl --env-url`: multi-turn word-list tasks.

    python3 scripts/rl_env.py --port 8100 [--turns 2] [--task reverse]
    claw rl ... --env-url http://127.0.0.1:8100

The protocol (src/claw/rl/env.h): claw POSTs one episode to /rollout,
    {"endpoint": "http://HOST:PORT/v1", "model": EPISODE_ID,
     "prompt": {"messages": [...]} or {"text": "..."}, "answer": "...", "max_tokens": N}
this environment asks the policy for a reply at `endpoint` (OpenAI chat
completions, `model` = the episode id), scores it, and while the reply is
not exact and --turns allows, tells the policy it was wrong and asks again;
it answers {"reward": R, "turns": K, "replies": [...]} with R the score of
the last reply (reverse/sort: the words in the right place over the longer
list's length; 1 only for the exact answer), or with --reward mean the mean
of the replies' scores (credit for a partly right first try that a weak
policy's retry loses).

For fault tests: --hang-every N makes every Nth episode hang (it never
answers), --fail-every N answers every Nth with HTTP 500. --port 0 picks a
free port; --port-file writes the port once the server listens. Standard
library only.
"""
import argparse
import itertools
import json
import os
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def score(task, reply, answer):
    got, want = reply.split(), answer.split()
    if task == "add":
        return 1.0 if reply.strip() == answer.strip() else 0.0
    n = max(len(got), len(want))
    if n == 0:
        return 1.0
    return sum(a == b for a, b in zip(got, want)) / n


def chat(endpoint, model, messages, max_tokens, timeout):
    body = json.dumps({"model": model, "messages": messages, "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(endpoint.rstrip("/") + "/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out = json.load(r)
    return out["choices"][0]["message"]["content"]


class Env:
    def __init__(self, a):
        self.a = a
        self.count = itertools.count(1)
        self.lock = threading.Lock()

    def episode(self, req):
        with self.lock:
            k = next(self.count)
        a = self.a
        if a.hang_every and k % a.hang_every == 0:
            time.sleep(a.hang_seconds)  # a hung environment: claw's --env-timeout ends the episode
        if a.fail_every and k % a.fail_every == 0:
            return 500, {"error": f"episode {k}: injected failure (--fail-every {a.fail_every})"}
        p = req["prompt"]
        messages = list(p["messages"]) if "messages" in p else [{"role": "user", "content": p["text"]}]
        answer = req["answer"]
        replies, scores = [], []
        for turn in range(a.turns):
            reply = chat(req["endpoint"], req["model"], messages, req.get("max_tokens"), a.policy_timeout)
            replies.append(reply)
            r = score(a.task, reply, answer)
            scores.append(r)
            if r == 1.0 or turn + 1 == a.turns:
                break
            messages += [{"role": "assistant", "content": reply.strip()},
                         {"role": "user", "content": "Not quite. Try again."}]
        if a.reward == "mean":
            r = sum(scores) / len(scores)
        return 200, {"reward": r, "turns": len(replies), "replies": replies}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8100)
    ap.add_argument("--port-file", help="write the port here once listening (with --port 0)")
    ap.add_argument("--task", default="reverse", choices=["reverse", "sort", "add"])
    ap.add_argument("--turns", type=int, default=2, help="replies the policy gets before the episode ends")
    ap.add_argument("--reward", default="last", choices=["last", "mean"],
                    help="an episode's reward: the last reply's score, or the mean over its replies")
    ap.add_argument("--policy-timeout", type=float, default=120.0, help="seconds to wait for one policy reply")
    ap.add_argument("--hang-every", type=int, default=0, help="every Nth episode hangs (fault tests)")
    ap.add_argument("--hang-seconds", type=float, default=3600.0)
    ap.add_argument("--fail-every", type=int, default=0, help="every Nth episode answers HTTP 500 (fault tests)")
    a = ap.parse_args()
    env = Env(a)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            if self.path.rstrip("/").split("/")[-1] != "rollout":
                return self.reply(404, {"error": f"no route POST {self.path} (POST /rollout)"})
            try:
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                status, out = env.episode(req)
            except Exception as e:  # the policy endpoint refused, or a bad request: say why
                status, out = 500, {"error": f"{type(e).__name__}: {e}"}
            self.reply(status, out)

        def reply(self, status, obj):
            body = json.dumps(obj).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # claw gave up on the episode (timeout)

        def log_message(self, *args):
            pass

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 256  # claw opens an episode's connection for every sample at once
    srv = ThreadingHTTPServer((a.host, a.port), Handler)
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(srv.server_address[1]))
        os.replace(tmp, a.port_file)
    print(f"rl_env: {a.task}, up to {a.turns} turns, reward {a.reward}, "
          f"on http://{a.host}:{srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
