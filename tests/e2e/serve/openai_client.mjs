// `claw serve` driven by the official `openai` npm package (Node.js), the
// JavaScript side of tests/e2e/serve/openai_client.sh: completions, chat,
// streaming with usage, n > 1, stop, logprobs, and an error.
//
//   node openai_client.mjs BASE_URL API_KEY MODEL   (with openai in NODE_PATH)
import OpenAI from "openai";

const [base, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0 });
const prompt = "Fellow citizens of the Senate and of the House of Representatives,";
let checks = 0;
function check(cond, what) {
  if (!cond) throw new Error(`FAIL: ${what}`);
  checks++;
  console.log(`ok: ${what}`);
}

const models = await client.models.list();
check(models.data.map((m) => m.id).join() === model, `models lists ${model}`);

const c = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0 });
check(c.choices.length === 1 && c.choices[0].text && c.choices[0].finish_reason === "length", "completion text");
check(c.usage.completion_tokens === 12 && c.usage.total_tokens === c.usage.prompt_tokens + 12, "completion usage");

const lp = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0, logprobs: 3 });
const L = lp.choices[0].logprobs;
check(L.tokens.length === 6 && L.top_logprobs.every((t) => Object.keys(t).length === 3), "completion logprobs");
check(L.top_logprobs.every((top, i) => Math.max(...Object.values(top)) === L.token_logprobs[i]), "greedy is the top token");

const s = await client.completions.create({ model, prompt, max_tokens: 10, temperature: 1.0, n: 3, seed: 11 });
const texts = s.choices.sort((a, b) => a.index - b.index).map((x) => x.text);
check(texts.length === 3 && new Set(texts).size > 1, "n=3 gives three different samples");
const stop = texts[0].slice(texts[0].length >> 1, (texts[0].length >> 1) + 3);
const st = await client.completions.create({ model, prompt, max_tokens: 10, temperature: 1.0, seed: 11, stop: [stop] });
check(st.choices[0].text === texts[0].slice(0, texts[0].indexOf(stop)) && st.choices[0].finish_reason === "stop",
      `stop ${JSON.stringify(stop)} ends the text before it`);

let streamed = "";
let usage = null;
const stream = await client.completions.create({
  model, prompt, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  if (chunk.choices.length) streamed += chunk.choices[0].text;
  if (chunk.usage) usage = chunk.usage;
}
check(streamed === c.choices[0].text, "streamed completion equals the plain one");
check(usage && usage.completion_tokens === 12, "the last chunk carries usage");

const messages = [{ role: "system", content: "You are terse." }, { role: "user", content: "Say something." }];
const ch = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, logprobs: true,
                                                  top_logprobs: 2 });
const m = ch.choices[0];
check(m.message.role === "assistant" && typeof m.message.content === "string", "chat message");
check(m.logprobs.content.length === ch.usage.completion_tokens, "chat logprobs per token");
let chatStreamed = "";
for await (const chunk of await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0,
                                                                  stream: true })) {
  if (chunk.choices.length && chunk.choices[0].delta.content) chatStreamed += chunk.choices[0].delta.content;
}
check(chatStreamed === m.message.content, "streamed chat equals the plain one");

try {
  await client.completions.create({ model, prompt, max_tokens: -1 });
  check(false, "max_tokens -1 refused");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.error?.param === "max_tokens",
        "max_tokens -1: 400 BadRequestError naming the field");
}
try {
  await new OpenAI({ baseURL: `${base}/v1`, apiKey: "wrong", maxRetries: 0 }).models.list();
  check(false, "a wrong key refused");
} catch (e) {
  check(e instanceof OpenAI.AuthenticationError && e.status === 401, "a wrong key: 401 AuthenticationError");
}
console.log(`openai npm client: ${checks} checks passed`);
