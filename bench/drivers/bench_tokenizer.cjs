// tiktoken's side of bench_tokenizer.py: encodes a file with npm
// tiktoken@1.0.22 (OpenAI's Rust core compiled to WASM, single-threaded)
// and prints one JSON object per mode:
//   lines  each line (without '\n') is one encode_ordinary() call, as
//          `claw tokenize` encodes one text per line
//   whole  the whole file in one call, as `claw tokenize --whole-input`
// mb_per_s is the best of REPEATS runs, after one warm-up call.
//
//   node bench_tokenizer.cjs NODE_MODULES ENCODING FILE REPEATS
'use strict';
const fs = require('fs');
const path = require('path');

const [nodeModules, encodingName, file, repeatsArg] = process.argv.slice(2);
const repeats = Number(repeatsArg || 3);
const { get_encoding } = require(path.join(nodeModules, 'tiktoken'));
const enc = get_encoding(encodingName);
const text = fs.readFileSync(file, 'utf8');
const bytes = Buffer.byteLength(text, 'utf8');
const lines = text.split('\n');
if (lines[lines.length - 1] === '') lines.pop();

function best(fn) {
  let tokens = 0;
  let bestS = Infinity;
  for (let r = 0; r < repeats; ++r) {
    const t0 = process.hrtime.bigint();
    tokens = fn();
    bestS = Math.min(bestS, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return { tokens, seconds: bestS };
}

enc.encode_ordinary('warm up');
const modes = {
  lines: () => {
    let n = 0;
    for (const l of lines) n += enc.encode_ordinary(l).length;
    return n;
  },
  whole: () => enc.encode_ordinary(text).length,
};
for (const [mode, fn] of Object.entries(modes)) {
  const { tokens, seconds } = best(fn);
  // Bytes actually encoded: line mode leaves out the newlines.
  const encoded = mode === 'lines' ? bytes - lines.length + (text.endsWith('\n') ? 0 : 1) : bytes;
  console.log(JSON.stringify({ mode, tokens, bytes: encoded, seconds, mb_per_s: encoded / seconds / 1e6 }));
}
enc.free();
