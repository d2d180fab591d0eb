// Compares token ids written by `claw tokenize` with OpenAI's tiktoken (npm
// tiktoken@1.0.22, installed by scripts/setup into <data dir>/npm).
//
//   node tiktoken_oracle.cjs NODE_MODULES ENCODING CASE...
//
// CASE = MODE:SPECIAL:TEXT_FILE:IDS_FILE, where MODE is `whole` (the file is
// one text, IDS_FILE has one line) or `lines` (each line of the file is a
// text without its '\n', IDS_FILE has one line per text), and SPECIAL is
// `text` (tiktoken encode_ordinary) or `all` (encode(text, "all")).
// Prints one line per case; on a mismatch, the first differing position
// with its context. Exits 1 if any case differs.
'use strict';
const fs = require('fs');
const path = require('path');

const [nodeModules, encodingName, ...cases] = process.argv.slice(2);
if (!nodeModules || !encodingName || cases.length === 0) {
  console.error('usage: node tiktoken_oracle.cjs NODE_MODULES ENCODING MODE:SPECIAL:TEXT_FILE:IDS_FILE...');
  process.exit(2);
}
const { get_encoding } = require(path.join(nodeModules, 'tiktoken'));
const enc = get_encoding(encodingName);

function texts(file, mode) {
  const all = fs.readFileSync(file, 'utf8');
  if (mode === 'whole') return [all];
  const lines = all.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

function claw_ids(file) {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines.map((l) => (l === '' ? [] : l.split(' ').map(Number)));
}

const decoder = new TextDecoder('utf-8');
function show(ids) {
  return JSON.stringify(decoder.decode(enc.decode(Uint32Array.from(ids))));
}

let failed = false;
for (const c of cases) {
  const [mode, special, textFile, idsFile] = c.split(':');
  const inputs = texts(textFile, mode);
  const got = claw_ids(idsFile);
  let tokens = 0;
  let error = null;
  if (got.length !== inputs.length) error = `claw wrote ${got.length} lines of ids for ${inputs.length} texts`;
  for (let i = 0; error === null && i < inputs.length; ++i) {
    const want = Array.from(special === 'all' ? enc.encode(inputs[i], 'all') : enc.encode_ordinary(inputs[i]));
    const have = got[i];
    tokens += want.length;
    let k = 0;
    while (k < want.length && k < have.length && want[k] === have[k]) ++k;
    if (k === want.length && k === have.length) continue;
    const where = mode === 'lines' ? `line ${i + 1}, ` : '';
    error =
      `${where}token ${k} of ${want.length}: after ${show(want.slice(Math.max(0, k - 8), k))}\n` +
      `    tiktoken: ${JSON.stringify(want.slice(k, k + 8))} = ${show(want.slice(k, k + 8))}\n` +
      `    claw:     ${JSON.stringify(have.slice(k, k + 8))}`;
  }
  const name = `${encodingName} ${mode} special=${special} ${path.basename(textFile)}`;
  if (error !== null) {
    failed = true;
    console.log(`FAIL ${name}: ${error}`);
  } else {
    console.log(`ok ${name}: ${inputs.length} texts, ${tokens} tokens identical`);
  }
}
enc.free();
process.exit(failed ? 1 : 0);
