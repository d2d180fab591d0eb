// Writes the tokenizer oracle corpus into OUT_DIR (a few MB per file):
//
//   prose.txt         the State of the Union speeches (<data dir>/sotu), English prose
//   code.txt          this repository's sources and the C headers in /usr/include
//   multilingual.txt  generated: CJK, kana, Hangul, Cyrillic, Greek, Arabic, Hebrew,
//                     Devanagari and Thai words, emoji (ZWJ sequences, skin tones,
//                     flags, keycaps), combining marks, numbers in several scripts,
//                     camelCase and ALLCAPS words, contractions, URLs, long runs
//                     without spaces, whitespace runs of every kind
//   fuzz.txt          generated: one short random string per line over an alphabet
//                     chosen to hit each branch of the pre-tokenizer regexes
//   special.txt       generated: text with special tokens and near-misses of them
//
// Generated text comes from a seeded PRNG (mulberry32), so every run and
// every machine writes the same bytes.
//
//   node make_corpus.cjs OUT_DIR DATA_DIR REPO_DIR
'use strict';
const fs = require('fs');
const path = require('path');

const [outDir, dataDir, repoDir] = process.argv.slice(2);
if (!outDir || !dataDir || !repoDir) {
  console.error('usage: node make_corpus.cjs OUT_DIR DATA_DIR REPO_DIR');
  process.exit(2);
}

function mulberry32(seed) {
  return function () {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = mulberry32(20240613);
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
const cp = (lo, hi) => String.fromCodePoint(int(lo, hi));
const word = (lo, hi, minLen, maxLen) => {
  let s = '';
  for (let n = int(minLen, maxLen); n > 0; --n) s += cp(lo, hi);
  return s;
};

function listFiles(dir, exts, out) {
  let entries;
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) listFiles(p, exts, out);
    else if (e.isFile() && exts.some((x) => e.name.endsWith(x))) out.push(p);
  }
  return out;
}

function isUtf8(buf) {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(buf);
    return true;
  } catch {
    return false;
  }
}

// --- prose -----------------------------------------------------------------
const sotuDir = path.join(dataDir, 'sotu');
const speeches = listFiles(sotuDir, ['.txt'], []);
if (speeches.length === 0) {
  console.error(`make_corpus: no speeches in ${sotuDir}; run scripts/fetch-data`);
  process.exit(1);
}
fs.writeFileSync(path.join(outDir, 'prose.txt'), speeches.map((f) => fs.readFileSync(f, 'utf8')).join('\n\n'));

// --- code ------------------------------------------------------------------
const code = [];
let codeBytes = 0;
for (const f of [
  ...listFiles(path.join(repoDir, 'src'), ['.h', '.cc'], []),
  ...listFiles(path.join(repoDir, 'tests'), ['.h', '.cc', '.sh', '.cjs', '.py', '.txt'], []),
  ...listFiles(path.join(repoDir, 'scripts'), [''], []),
  ...listFiles('/usr/include', ['.h'], []),
]) {
  const buf = fs.readFileSync(f);
  if (!isUtf8(buf)) continue;
  code.push(buf.toString('utf8'));
  codeBytes += buf.length;
  if (codeBytes > 6e6) break;
}
fs.writeFileSync(path.join(outDir, 'code.txt'), code.join('\n'));

// --- multilingual ----------------------------------------------------------
const scripts = [
  () => word(0x4e00, 0x9fff, 1, 40),  // CJK ideographs, often long runs without spaces
  () => word(0x3041, 0x3096, 1, 8) + word(0x4e00, 0x9fff, 1, 3) + word(0x30a1, 0x30fa, 1, 6),  // kana + kanji
  () => word(0xac00, 0xd7a3, 1, 5),  // Hangul syllables
  () => word(0x0430, 0x044f, 2, 10),  // Cyrillic lower
  () => cp(0x0410, 0x042f) + word(0x0430, 0x044f, 1, 9),  // Cyrillic capitalised
  () => word(0x03b1, 0x03c9, 2, 9),  // Greek
  () => word(0x0627, 0x064a, 2, 8),  // Arabic
  () => word(0x05d0, 0x05ea, 2, 7),  // Hebrew
  () => Array.from({ length: int(1, 4) }, () => cp(0x0915, 0x0939) + pick(['', '\u093e', '\u093f', '\u0940', '\u094d', '\u0902'])).join(''),  // Devanagari + marks
  () => word(0x0e01, 0x0e2e, 2, 12) + pick(['', '\u0e31', '\u0e34', '\u0e48']),  // Thai
  () => pick(['caf\u00e9', 'na\u00efve', 'Stra\u00dfe', '\u0141\u00f3d\u017a', 'e\u0301te\u0301', 'A\u030angstro\u0308m', '\u01c5ungla', '\u02b0\u02b2']),
  () => pick(['\u{1F600}', '\u{1F44D}\u{1F3FD}', '\u{1F468}\u200d\u{1F469}\u200d\u{1F467}', '\u{1F1FA}\u{1F1F8}', '1\ufe0f\u20e3', '\u2764\ufe0f', '\u{1F3F3}\ufe0f\u200d\u{1F308}', '\u{1F9D1}\u200d\u{1F4BB}']).repeat(int(1, 3)),
  () => String(int(0, 10 ** int(1, 9))),  // ASCII numbers, grouped by 3 in cl100k/o200k
  () => word(0x0660, 0x0669, 1, 7),  // Arabic-Indic digits
  () => word(0xff10, 0xff19, 1, 5),  // fullwidth digits
  () => pick(['\u2167', '\u00bd', '\u00b2', '\u3007', '\u{1D7D8}\u{1D7D9}']),  // other numbers
  () => pick(['parseHTTPResponse', 'getElementById', 'XMLHttpRequest', 'iOS', 'NASA', 'McDonald', 'ABCdef', 'snake_case_name']),
  () => pick(["don't", "I'M", "we'LL", "they'Re", "it\u2019s", "'s", "o'clock", "\u017f'\u017f", "'\u017fup", "rock'n'roll"]),
  () => pick(['https://example.com/a/b?c=1&d=2#e', '/usr/local/lib//', 'a/b/c', 'C:\\Windows\\System32', '<div class="x">', '{"k": [1, 2.5e-3]}']),
  () => pick(['...', '!!!', '?!', '\u2014', '\u00ab\u00bb', '\u300c\u300d', '\uff0c', '\u3002', '\u2026']),
  () => word(0x61, 0x7a, 200, 3000),  // a long run of letters (heap path of the BPE core)
  () => pick(['aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', '='.repeat(int(10, 300)), '-'.repeat(int(2, 80))]),
];
const spaces = [' ', ' ', ' ', ' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n', '\n ', '  \n\n  ', '\u00a0', '\u3000', '\u2003', '\u2028', '\u0085', '\ufeff', '\u200b', '\t\t\n'];
let multi = '';
while (multi.length < 1.5e6) multi += pick(scripts)() + pick(spaces);
fs.writeFileSync(path.join(outDir, 'multilingual.txt'), multi);

// --- fuzz ------------------------------------------------------------------
const alphabet = [
  ...'aAbZsStTrReEvVmMlLdDkK\'\'\'\' \t\r/.,!?-_()[]{}0123456789',
  '\u017f', '\u00a0', '\u3000', '\u2028', '\u0085', '\u0301', '\u0308', '\u093f', '\u01c5', '\u02b0', '\u4e2d', '\u6587',
  '\u3042', '\uac00', '\u0660', '\u2167', '\u00bd', '\u{1F600}', '\u200d', '\u{1F3FD}', '\ufeff', '\u00e9', '\u0416',
  '\u0436', '\u05d0', '\u0627', '\u1f88', '\u212a', '\u{1D518}', '\u0130', '\u0131', '\u00df', '\u1e9e', '  ', '\r\r',
];
const fuzz = [];
for (let i = 0; i < 40000; ++i) {
  let s = '';
  for (let n = int(0, 30); n > 0; --n) s += pick(alphabet);
  fuzz.push(s);
}
fs.writeFileSync(path.join(outDir, 'fuzz.txt'), fuzz.join('\n') + '\n');

// --- special tokens ----------------------------------------------------------
const specials = ['<|endoftext|>', '<|fim_prefix|>', '<|fim_middle|>', '<|fim_suffix|>', '<|endofprompt|>'];
const nearMisses = ['<|endoftext', '<|endoftext|', 'endoftext|>', '<|ENDOFTEXT|>', '<| endoftext |>', '<<|endoftext|>>', '<|<|endoftext|>'];
let special = '';
while (special.length < 3e5) {
  special += pick(scripts)() + pick(spaces);
  const r = rand();
  if (r < 0.15) special += pick(specials);
  else if (r < 0.2) special += pick(nearMisses);
}
fs.writeFileSync(path.join(outDir, 'special.txt'), special);
