#include "claw/serve/chat_page.h"

namespace claw::serve {

const std::string_view kChatPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>claw chat</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; display: flex; flex-direction: column; height: 100vh;
         background: #f6f7f9; color: #1d2330; }
  header { padding: 10px 16px; background: #1d2330; color: #fff; display: flex; gap: 12px; align-items: center; }
  header b { font-size: 17px; }
  header span { opacity: .75; font-size: 13px; }
  header input { margin-left: auto; padding: 4px 6px; border-radius: 4px; border: 0; width: 180px; }
  #log { flex: 1; overflow-y: auto; padding: 16px; display: flex; flex-direction: column; gap: 10px; }
  .msg { max-width: 75%; padding: 8px 12px; border-radius: 10px; white-space: pre-wrap; word-wrap: break-word; }
  .user { align-self: flex-end; background: #2f6fde; color: #fff; }
  .assistant { align-self: flex-start; background: #fff; border: 1px solid #dde1e8; }
  .error { align-self: center; color: #b3261e; font-size: 13px; }
  .stats { align-self: flex-start; font-size: 12px; color: #6b7280; margin-top: -6px; }
  form { display: flex; gap: 8px; padding: 12px 16px; background: #fff; border-top: 1px solid #dde1e8; }
  textarea { flex: 1; resize: none; height: 44px; padding: 8px; font: inherit; border: 1px solid #c8cdd6;
             border-radius: 6px; }
  button { padding: 0 18px; border: 0; border-radius: 6px; background: #2f6fde; color: #fff; font: inherit; }
  button:disabled { background: #9db6e8; }
</style>
</head>
<body>
<header><b>claw chat</b><span id="model">connecting…</span>
  <input id="key" type="password" placeholder="API key (if the server needs one)"></header>
<div id="log"></div>
<form id="form"><textarea id="input" placeholder="Send a message (Enter; Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button></form>
<script>
"use strict";
const log = document.getElementById("log"), input = document.getElementById("input");
const send = document.getElementById("send"), keyBox = document.getElementById("key");
const history = [];
let model = null;
keyBox.value = localStorage.getItem("claw-api-key") || "";
keyBox.onchange = () => { localStorage.setItem("claw-api-key", keyBox.value); loadModel(); };
function headers() {
  const h = { "Content-Type": "application/json" };
  if (keyBox.value) h["Authorization"] = "Bearer " + keyBox.value;
  return h;
}
function add(cls, text) {
  const div = document.createElement("div");
  div.className = "msg " + cls;
  div.textContent = text;
  log.appendChild(div);
  log.scrollTop = log.scrollHeight;
  return div;
}
async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    const j = await r.json();
    if (!r.ok) throw new Error(j.error ? j.error.message : r.statusText);
    model = j.data[0].id;
    document.getElementById("model").textContent = model;
  } catch (e) {
    document.getElementById("model").textContent = "no model: " + e.message;
  }
}
async function chat(text) {
  history.push({ role: "user", content: text });
  add("user", text);
  const out = add("assistant", "");
  out.dataset.state = "streaming";
  const t0 = performance.now();
  let first = 0, tokens = 0, reply = "";
  try {
    const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify({
      model, messages: history, stream: true, max_tokens: 256, temperature: 0.7,
      stream_options: { include_usage: true } }) });
    if (!r.ok) {
      const j = await r.json();
      throw new Error(j.error ? j.error.message : r.statusText);
    }
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let at;
      while ((at = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, at);
        buf = buf.slice(at + 2);
        if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
        const j = JSON.parse(event.slice(6));
        if (j.usage) tokens = j.usage.completion_tokens;
        const d = j.choices && j.choices[0] && j.choices[0].delta;
        if (d && d.content) {
          if (!first) first = performance.now();
          reply += d.content;
          out.textContent = reply;
          log.scrollTop = log.scrollHeight;
        }
      }
    }
    history.push({ role: "assistant", content: reply });
    const secs = (performance.now() - (first || t0)) / 1000;
    const s = add("stats", `${tokens} tokens · first after ${((first || t0) - t0).toFixed(0)} ms · ` +
                           `${tokens > 1 ? ((tokens - 1) / secs).toFixed(1) : "–"} tokens/s`);
    s.className = "stats";
  } catch (e) {
    history.pop();
    add("error", "error: " + e.message).className = "error";
  }
  out.dataset.state = "done";
}
document.getElementById("form").onsubmit = async (ev) => {
  ev.preventDefault();
  const text = input.value.trim();
  if (!text || send.disabled) return;
  input.value = "";
  send.disabled = true;
  await chat(text);
  send.disabled = false;
  input.focus();
};
input.onkeydown = (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); document.getElementById("form").requestSubmit(); }
};
loadModel();
</script>
</body>
</html>
)HTML";

}  // namespace claw::serve
