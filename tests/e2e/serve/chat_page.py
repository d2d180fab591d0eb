"""Drives `claw serve`'s chat page (GET /) in headless Chromium through
chromedriver's W3C WebDriver protocol (JSON over HTTP; Python's standard
library only): loads the page, types a message, sends it, waits for the
streamed reply, checks it, and saves a screenshot.

    chat_page.py BASE_URL SCREENSHOT.png [API_KEY]
"""
import base64
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

base, shot = sys.argv[1], sys.argv[2]
api_key = sys.argv[3] if len(sys.argv) > 3 else ""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


port = free_port()
driver_bin = shutil.which("chromedriver") or "/usr/bin/chromedriver"
driver = subprocess.Popen([driver_bin, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
wd = f"http://127.0.0.1:{port}"


def call(method, path, body=None):
    req = urllib.request.Request(wd + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["value"]


try:
    for _ in range(100):
        try:
            call("GET", "/status")
            break
        except OSError:
            time.sleep(0.1)
    session = call("POST", "/session", {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
        "binary": shutil.which("chromium") or "/usr/bin/chromium",
        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=900,640"]}}}})["sessionId"]
    s = f"/session/{session}"

    def find(css):
        return call("POST", s + "/element", {"using": "css selector", "value": css})
    def eid(e):
        return next(iter(e.values()))
    def script(js, *args):
        return call("POST", s + "/execute/sync", {"script": js, "args": list(args)})

    call("POST", s + "/url", {"url": base + "/"})
    if api_key:
        script("const k = document.getElementById('key'); k.value = arguments[0]; k.onchange();", api_key)
    for _ in range(100):  # the model name arrives from /v1/models (once the key is in)
        model = script("return document.getElementById('model').textContent;")
        if model and model != "connecting…" and not model.startswith("no model"):
            break
        time.sleep(0.1)
    assert not model.startswith("no model"), model
    message = "Tell me about the state of the union."
    call("POST", s + f"/element/{eid(find('#input'))}/value", {"text": message})
    call("POST", s + f"/element/{eid(find('#send'))}/click", {})
    reply, streamed_steps = "", set()
    for _ in range(600):
        state = script("const m = document.querySelectorAll('.assistant'); "
                       "return m.length ? [m[m.length - 1].dataset.state, m[m.length - 1].textContent] : null;")
        if state:
            streamed_steps.add(len(state[1]))
            if state[0] == "done":
                reply = state[1]
                break
        time.sleep(0.05)
    user = script("return [...document.querySelectorAll('.user')].map(e => e.textContent);")
    errors = script("return [...document.querySelectorAll('.error')].map(e => e.textContent);")
    stats = script("return [...document.querySelectorAll('.stats')].map(e => e.textContent);")
    assert not errors, errors
    assert user == [message], user
    assert reply, "no reply"
    assert stats and "tokens" in stats[0], stats
    png = base64.b64decode(call("GET", s + "/screenshot"))
    assert png.startswith(b"\x89PNG"), png[:8]
    with open(shot, "wb") as f:
        f.write(png)
    call("DELETE", s)
    print(f"chat page: model {model}; sent {message!r}; the reply streamed in ({len(reply)} characters, seen at "
          f"{len(streamed_steps)} lengths; {stats[0]}); screenshot {shot} ({len(png)} bytes)")
finally:
    driver.terminate()
    driver.wait()
