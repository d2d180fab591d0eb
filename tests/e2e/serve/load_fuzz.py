"""Load and fuzz tests of a running `claw serve` (the client side of
tests/e2e/serve/load_fuzz.sh); Python's standard library only, real sockets.

    load_fuzz.py load PORT N CONCURRENCY   bursts of 2 x CONCURRENCY simultaneous connections, then
                                           N requests from CONCURRENCY threads: valid completions
                                           and chats (checked: 200, the token counts asked for),
                                           streams dropped after their first event, malformed
                                           bodies (checked: 400 with OpenAI's error JSON);
                                           then /metrics: no KV block in use, nothing running
    load_fuzz.py limits PORT PID           admission and connection limits (the server started with
                                           --max-body-size 1MiB --max-request-sequences 32 --max-queued-sequences 64
                                           --max-connections-per-client 320 --shutdown-timeout 0.2):
                                           20,000 sequences in one call refused at once and a
                                           one-token request answered right after; a full queue 429;
                                           a dropped non-streaming request cancelled within a few
                                           engine steps; 300 half-open connections and bad body
                                           lengths leave /health answering; the per-client cap; Host
                                           and Content-Type checks; SIGTERM cancels what is left
    load_fuzz.py fuzz PORT SECONDS SEED    random and mutated JSON bodies and raw HTTP requests
                                           (broken request lines, headers, lengths) for SECONDS:
                                           every answer is an HTTP status with a JSON body when it
                                           is an error, and the server stays up
"""
import http.client
import json
import os
import random
import signal
import socket
import sys
import threading
import time

HOST = "127.0.0.1"


def request(port, method, path, body=None, headers=None, timeout=120):
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def metrics(port):
    status, body = request(port, "GET", "/metrics")
    assert status == 200, status
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def error_json(status, body, want_status, what):
    assert status == want_status, (what, status, body[:200])
    e = json.loads(body)["error"]
    assert isinstance(e["message"], str) and e["message"] and "type" in e, (what, e)


MALFORMED = [
    b"{", b"[]", b"null", b'"text"', b'{"prompt": 5}', b'{"prompt": "x", "max_tokens": "ten"}',
    b'{"prompt": "x", "temperature": -1}', b'{"prompt": "x", "n": 0}', b'{"prompt": [[]]}',
    b'{"prompt": "x", "stop": 3}', b'{"messages": "hi"}', b'{"prompt": "x", "logprobs": 99}',
    b'\xff\xfe\x00', b'{"prompt": "x", "max_tokens": 1e400}',
]


def burst(port, width, rounds):
    """`width` connections opened at the same instant, `rounds` times: every
    one answered (a listen backlog smaller than the burst makes the kernel
    drop or reset some of them)."""
    errors = []
    for r in range(rounds):
        barrier = threading.Barrier(width)

        def one(i):
            barrier.wait()
            try:
                body = {"prompt": [300 + i, 301, 302], "max_tokens": 2, "ignore_eos": True}
                status, out = request(port, "POST", "/v1/completions", json.dumps(body))
                assert status == 200, (status, out[:200])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"burst {r} connection {i}: {e!r}")

        threads = [threading.Thread(target=one, args=(i,)) for i in range(width)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, "\n".join(errors[:10]) + f"\n({len(errors)} failures)"
    print(f"burst: {rounds} x {width} simultaneous connections, every one answered")


def load(port, n, concurrency):
    burst(port, 2 * concurrency, 4)
    counts = {"completion": 0, "chat": 0, "dropped": 0, "malformed": 0}
    lock = threading.Lock()
    errors = []
    next_i = [0]

    def one(i):
        rng = random.Random(i)
        kind = rng.choice(["completion"] * 5 + ["chat"] * 2 + ["dropped"] * 2 + ["malformed"])
        if kind == "completion":
            k = rng.randint(1, 8)
            body = {"prompt": "The people " * rng.randint(1, 20), "max_tokens": k, "temperature": rng.choice([0, 0.8]),
                    "seed": i, "ignore_eos": True}
            status, out = request(port, "POST", "/v1/completions", json.dumps(body))
            assert status == 200, (status, out[:200])
            o = json.loads(out)
            assert o["usage"]["completion_tokens"] == k, o
        elif kind == "chat":
            body = {"messages": [{"role": "user", "content": "Hello " * rng.randint(1, 10)}], "max_tokens": 4,
                    "ignore_eos": True}
            status, out = request(port, "POST", "/v1/chat/completions", json.dumps(body))
            assert status == 200, (status, out[:200])
            assert json.loads(out)["usage"]["completion_tokens"] == 4
        elif kind == "dropped":
            # A stream the client abandons after its first event: the server
            # must cancel it and free its blocks.
            s = socket.create_connection((HOST, port), timeout=60)
            body = json.dumps({"prompt": "Long ago " * 10, "max_tokens": 200, "stream": True, "ignore_eos": True})
            s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
            got = b""
            while b"data:" not in got:
                chunk = s.recv(4096)
                assert chunk, "closed before the first event"
                got += chunk
            assert got.startswith(b"HTTP/1.1 200"), got[:100]
            s.close()
        else:
            status, out = request(port, "POST", rng.choice(["/v1/completions", "/v1/chat/completions"]),
                                  rng.choice(MALFORMED))
            error_json(status, out, 400, "malformed body")
        with lock:
            counts[kind] += 1

    def worker():
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= n:
                return
            try:
                one(i)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(f"request {i}: {e!r}")

    t0 = time.time()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    assert not errors, "\n".join(errors[:10]) + f"\n({len(errors)} failures)"
    # Dropped streams are cancelled when the server next writes to them.
    for _ in range(200):
        m = metrics(port)
        if m["claw:kv_blocks_used"] == 0 and m["claw:num_requests_running"] == 0:
            break
        time.sleep(0.05)
    assert m["claw:kv_blocks_used"] == 0, m
    assert m["claw:num_requests_running"] == 0 and m["claw:num_requests_waiting"] == 0, m
    status, _ = request(port, "GET", "/health")
    assert status == 200
    print(f"load: {n} requests at concurrency {concurrency} in {elapsed:.1f} s ({counts}); every valid one "
          f"answered, every malformed one a 400; KV blocks in use at the end: 0")


def mutate(rng, data):
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(4)
        if op == 0 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 1:
            b.insert(rng.randrange(len(b) + 1), rng.choice(b'{}[]",:0123456789.-eE\\\x00nulltrue'))
        elif op == 2 and b:
            del b[rng.randrange(len(b))]
        else:
            i = rng.randrange(len(b) + 1)
            b[i:i] = b[: rng.randrange(len(b) + 1)]
    return bytes(b)


def random_json(rng, depth=0):
    kinds = ["int", "float", "str", "bool", "null"] + (["list", "dict"] if depth < 3 else [])
    k = rng.choice(kinds)
    if k == "int":
        return rng.choice([0, 1, -1, 2**31, -2**63, 10**30, rng.randint(-100, 100)])
    if k == "float":
        return rng.choice([0.5, -1.5, 1e308, -1e-308, float(rng.random())])
    if k == "str":
        return rng.choice(["", "x", "\u00e9\u4e2d", "\ud7ff", "a" * rng.randint(0, 3000), "<|endoftext|>"])
    if k == "bool":
        return rng.random() < 0.5
    if k == "null":
        return None
    if k == "list":
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["prompt", "messages", "max_tokens", "temperature", "top_p", "n", "stop", "seed", "logprobs",
            "top_logprobs", "echo", "stream", "stream_options", "model", "role", "content", "min_p", "top_k"]
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.randint(0, 6))}


SEEDS = [
    {"prompt": "Hi", "max_tokens": 3},
    {"prompt": [1, 2, 3], "max_tokens": 2, "logprobs": 2, "echo": True},
    {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": True,
     "stream_options": {"include_usage": True}},
    {"prompt": ["a", "b"], "n": 2, "max_tokens": 2, "stop": ["\n"], "seed": 1},
]


def raw(port, data, timeout=0.5):
    """Sends data and reads until the server closes (the requests say
    Connection: close) or stops sending for `timeout` seconds (a request that
    promised more body than it sent)."""
    # Connecting may wait behind the listen backlog on a loaded machine
    # (requests that promised more body hold server threads until they give
    # up): a generous connect timeout, then the short read one.
    s = socket.create_connection((HOST, port), timeout=30)
    s.settimeout(timeout)
    out = b""
    try:
        s.sendall(data)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    return out


def check_answer(out, what):
    if not out:
        return  # the server may close a connection whose request line it cannot parse
    assert out.startswith(b"HTTP/1.1 "), (what, out[:80])
    status = int(out[9:12])
    assert 200 <= status < 600, (what, out[:80])
    head, _, body = out.partition(b"\r\n\r\n")
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        fields[k.strip().lower()] = v.strip()
    if status >= 400 and b"application/json" in fields.get(b"content-type", b""):
        # The first response only: a wrong Content-Length leaves bytes that
        # the server reads as a further request on the same connection.
        n = int(fields.get(b"content-length", len(body)))
        try:
            json.loads(body[:n])
        except ValueError:
            raise AssertionError(f"{what!r}: error body is not JSON: {out[:400]!r}")


def fuzz(port, seconds, seed, threads=8):
    end = time.time() + seconds
    lock = threading.Lock()
    seen, errors, count = {}, [], [0]

    def worker(k):
        rng = random.Random(seed * 1000 + k)
        while time.time() < end:
            path = rng.choice(["/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics",
                               "/nope"])
            r = rng.random()
            if r < 0.4:
                body = json.dumps(random_json(rng)).encode()
            elif r < 0.8:
                body = mutate(rng, json.dumps(rng.choice(SEEDS)).encode())
            else:
                body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
            headers = [f"Content-Type: {rng.choice(['application/json', 'text/plain', ''])}"]
            length = len(body)
            h = rng.random()
            if h < 0.1:
                length = rng.choice([0, max(0, length - 3), 2**62] + ([length + 5] if rng.random() < 0.1 else []))
            elif h < 0.15:
                headers.append("Transfer-Encoding: chunked")
            elif h < 0.2:
                headers.append("X" * rng.randint(1, 9000) + ": y")
            method = rng.choice(["POST"] * 8 + ["GET", "PUT", "\x00POST", "POST /x"])
            line = f"{method} {path} HTTP/1.1" if rng.random() > 0.05 else "garbage"
            host = "127.0.0.1" if rng.random() < 0.9 else rng.choice(["x", "", "[::1]:1", "localhost:80"])
            req = (line + f"\r\nHost: {host}\r\nConnection: close\r\n" + "".join(x + "\r\n" for x in headers) +
                   f"Content-Length: {length}\r\n\r\n")
            try:
                out = raw(port, req.encode("latin-1") + body)
                check_answer(out, req[:200])
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(repr(e))
                return
            with lock:
                count[0] += 1
                if out:
                    seen[int(out[9:12])] = seen.get(int(out[9:12]), 0) + 1

    workers = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    while any(t.is_alive() for t in workers):
        status, _ = request(port, "GET", "/health")
        assert status == 200, "the server stopped answering"
        time.sleep(1)
    for t in workers:
        t.join()
    assert not errors, "\n".join(errors[:5])
    status, _ = request(port, "GET", "/health")
    assert status == 200
    print(f"fuzz: {count[0]} random and mutated requests from {threads} threads in {seconds:g} s "
          f"(statuses {dict(sorted(seen.items()))}); no crash, every error a JSON body")


def raw_open(port, data):
    s = socket.create_connection((HOST, port), timeout=30)
    s.sendall(data)
    return s


def read_reply(s, timeout):
    """What the server sends until it closes, within `timeout` seconds."""
    s.settimeout(timeout)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return out


def limits(port, pid):
    # 1. One request of 20,000 prompts x n 16: refused before anything is
    # queued; a one-token request right after is answered at once.
    t0 = time.time()
    status, out = request(port, "POST", "/v1/completions", json.dumps({"prompt": ["a"] * 20000, "n": 16,
                                                                        "max_tokens": 1}))
    refused = time.time() - t0
    error_json(status, out, 400, "20,000 x 16 sequences")
    assert b"--max-request-sequences" in out, out
    t0 = time.time()
    status, out = request(port, "POST", "/v1/completions", json.dumps({"prompt": "Hi", "max_tokens": 1}))
    answered = time.time() - t0
    assert status == 200, (status, out[:200])
    assert answered < 1.0, f"a one-token request took {answered:.2f} s after the refused one"
    m = metrics(port)
    assert m["claw:num_requests_waiting"] == 0 and m["claw:admitted_sequences"] == 0, m
    print(f"limits: 320,000 sequences refused (400) in {refused * 1000:.0f} ms; a one-token request answered "
          f"{answered * 1000:.0f} ms later")

    # 2. The queue: two streams of 32 sequences hold 64 (--max-queued-sequences);
    # a third request is told to come back (429); it fits once they end.
    streams = []
    for _ in range(2):
        body = json.dumps({"prompt": ["Once"] * 4, "n": 8, "max_tokens": 200, "stream": True, "ignore_eos": True})
        s = raw_open(port, f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        got = b""
        while b"data:" not in got:
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
        streams.append(s)
    status, out = request(port, "POST", "/v1/completions", json.dumps({"prompt": "Hi", "max_tokens": 1}))
    error_json(status, out, 429, "a request beyond --max-queued-sequences")
    assert b"--max-queued-sequences" in out, out
    for s in streams:
        s.close()
    for _ in range(200):
        m = metrics(port)
        if m["claw:admitted_sequences"] == 0 and m["claw:kv_blocks_used"] == 0:
            break
        time.sleep(0.05)
    assert m["claw:admitted_sequences"] == 0 and m["claw:kv_blocks_used"] == 0, m
    status, out = request(port, "POST", "/v1/completions", json.dumps({"prompt": "Hi", "max_tokens": 1}))
    assert status == 200, (status, out[:200])
    print("limits: 64 sequences admitted, the next request 429 (--max-queued-sequences), answered once they ended")

    # 3. A non-streaming request whose client leaves: cancelled within a few
    # engine steps (it asked for 200 tokens, so 200 steps if it ran on).
    body = json.dumps({"prompt": ["Fellow"] * 4, "n": 8, "max_tokens": 200, "ignore_eos": True})
    s = raw_open(port, f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    for _ in range(400):
        m = metrics(port)
        if m["claw:num_requests_running"] > 0 and m["claw:kv_blocks_used"] > 0:
            break
        time.sleep(0.01)
    assert m["claw:kv_blocks_used"] > 0, m
    s.close()
    steps_at_close = m["claw:engine_steps_total"]
    for _ in range(400):
        m = metrics(port)
        if m["claw:kv_blocks_used"] == 0 and m["claw:num_requests_running"] == 0:
            break
        time.sleep(0.01)
    ran_on = m["claw:engine_steps_total"] - steps_at_close
    assert m["claw:kv_blocks_used"] == 0 and m["claw:num_requests_running"] == 0, m
    assert ran_on <= 20, f"the dropped request ran {ran_on:.0f} more engine steps"
    print(f"limits: a dropped non-streaming request (32 sequences, 200 tokens) freed its KV blocks "
          f"{ran_on:.0f} engine step(s) after the client left")

    # 4. 300 connections that send half a head, and bodies that promise what
    # they never send: /health still answers, and the bad lengths at once.
    half = [raw_open(port, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le") for _ in range(300)]
    t0 = time.time()
    status, _ = request(port, "GET", "/health", timeout=5)
    assert status == 200, status
    health = time.time() - t0
    bad = {"Content-Length: -1": 413, "Content-Length: 99999999999999999999999": 413,
           "Content-Length: 12x": 400, "Transfer-Encoding: chunked": 400}
    for header, want in bad.items():
        tail = b"fffffffffff\r\n" if "chunked" in header else b""
        t0 = time.time()
        c = raw_open(port, f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           f"{header}\r\n\r\n".encode() + tail)
        out = read_reply(c, 10)
        took = time.time() - t0
        c.close()
        assert out.startswith(b"HTTP/1.1 %d" % want), (header, out[:200])
        assert took < 3, f"{header}: answered after {took:.1f} s"
    # The half heads are dropped after --header-timeout (5 s).
    t0 = time.time()
    out = read_reply(half[0], 15)
    dropped = time.time() - t0
    assert dropped < 10, f"a half head was held {dropped:.1f} s"
    for c in half:
        c.close()
    print(f"limits: 300 half-open connections: /health answered in {health * 1000:.0f} ms, bad lengths "
          f"(-1, overflowing, malformed, a huge chunk) refused at once, half heads dropped after {dropped:.1f} s")

    # 5. One client's connections beyond --max-connections-per-client (320): 429.
    held = [raw_open(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n") for _ in range(330)]
    time.sleep(0.5)
    replies = [read_reply(c, 0.05) for c in held]
    refused = sum(r.startswith(b"HTTP/1.1 429") for r in replies)
    for c in held:
        c.close()
    assert refused >= 10, f"{refused} of 330 connections refused"
    m = metrics(port)
    assert m["claw:http_connections_refused_total"] >= 10, m
    print(f"limits: {refused} of 330 simultaneous connections from one client refused (429)")

    # 6. Without --api-key: a foreign Host (DNS rebinding) and a non-JSON body
    # (a cross-site form) are refused; loopback names are served.
    body = json.dumps({"prompt": "Hi", "max_tokens": 1})
    for host, ctype, want in [("evil.example", "application/json", 403), ("127.0.0.1:1", "text/plain", 415),
                              ("127.0.0.1:1", "application/x-www-form-urlencoded", 415),
                              (f"localhost:{port}", "application/json; charset=utf-8", 200),
                              ("[::1]:8000", "application/json", 200)]:
        status, out = request(port, "POST", "/v1/completions", body, {"Host": host, "Content-Type": ctype})
        assert status == want, (host, ctype, status, out[:200])
    print("limits: foreign Host 403, text/plain and form bodies 415, loopback names served")

    # Special-token text in a chat message is the user's text, not a special
    # token (GPT-2's <|endoftext|>: 1 id as special, several as text).
    def chat_prompt_tokens(content):
        status, out = request(port, "POST", "/v1/chat/completions", json.dumps(
            {"messages": [{"role": "user", "content": content}], "max_tokens": 1}))
        assert status == 200, (status, out[:200])
        return json.loads(out)["usage"]["prompt_tokens"]

    forged = chat_prompt_tokens("<|endoftext|>") - chat_prompt_tokens("")
    assert forged > 1, f"<|endoftext|> in a message took {forged} token(s): read as the special token"
    print(f"limits: '<|endoftext|>' in a chat message is {forged} tokens of text, not the special token")

    # 7. SIGTERM with a request running: drained for --shutdown-timeout (0.2 s),
    # then cancelled with a 503; the server exits (the shell checks its code).
    result = {}

    def long_request():
        result["reply"] = request(port, "POST", "/v1/completions", json.dumps(
            {"prompt": ["Fellow"] * 4, "n": 8, "max_tokens": 250, "ignore_eos": True}))

    t = threading.Thread(target=long_request)
    t.start()
    for _ in range(400):
        if metrics(port)["claw:num_requests_running"] > 0:
            break
        time.sleep(0.01)
    os.kill(pid, signal.SIGTERM)
    t.join(30)
    assert not t.is_alive(), "the request was not answered after SIGTERM"
    error_json(*result["reply"], 503, "a request cancelled by the shutdown")
    print("limits: SIGTERM: the running request cancelled with 503 after --shutdown-timeout")


if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "load":
        load(port, int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "limits":
        limits(port, int(sys.argv[3]))
    elif mode == "fuzz":
        fuzz(port, float(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(__doc__)
