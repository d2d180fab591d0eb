#!/usr/bin/env python3
"""Writes src/claw/curate/spacy_en_tables.inc: the data of spaCy's
English tokenizer and sentencizer (spacy.blank("en"), the word tokenizer of
datatrove's filters) and datatrove's punctuation sets, for text_stats.cc (character classes) and spacy_tokenizer.cc.

Run with a Python that has spaCy and datatrove (the comparison venv):
  /tmp/claw-curate-venv/bin/python tests/e2e/curate/curate_spacy_tables.py > src/claw/curate/spacy_en_tables.inc

Character classes are taken by asking Python's `re` which code points each
bracket expression of spaCy's affix rules matches, so the quirks of those
expressions (a '|' inside a class, ranges like "а-я") come along exactly.
The structure of the rules (which alternatives, in which order) is written
by hand in spacy_tokenizer.cc; the asserts below fail if a spaCy release changes it.
"""
import re
import sys

import spacy
from spacy.lang import char_classes as cc
from spacy.lang import punctuation as P
from spacy.lang.en import punctuation as EP
from spacy.lang.tokenizer_exceptions import URL_PATTERN
from spacy.pipeline.sentencizer import Sentencizer
from spacy.symbols import ORTH

from datatrove.utils.text import PUNCTUATION_SET, TERMINAL_PUNCTUATION

nlp = spacy.blank("en")
D = nlp.Defaults

# The rule lists spacy_tokenizer.cc implements, rebuilt here from their parts.
al, au, a, q = cc.ALPHA_LOWER, cc.ALPHA_UPPER, cc.ALPHA, cc.CONCAT_QUOTES
SUFFIX_DOT_BEHIND = "[0-9{al}{e}{p}(?:{q})]".format(al=al, e=r"%²\-\+", q=q, p=cc.PUNCT)
expect_prefixes = (["§", "%", "=", "—", "–", r"\+(?![0-9])"] + cc.LIST_PUNCT + cc.LIST_ELLIPSES + cc.LIST_QUOTES
                   + cc.LIST_CURRENCY + cc.LIST_ICONS)
expect_suffixes = (cc.LIST_PUNCT + cc.LIST_ELLIPSES + cc.LIST_QUOTES + cc.LIST_ICONS
                   + ["'s", "'S", "’s", "’S", "—", "–"]
                   + [r"(?<=[0-9])\+", r"(?<=°[FfCcKk])\.", r"(?<=[0-9])(?:{c})".format(c=cc.CURRENCY),
                      r"(?<=[0-9])(?:{u})".format(u=cc.UNITS), r"(?<=%s)\." % SUFFIX_DOT_BEHIND,
                      r"(?<=[{au}][{au}])\.".format(au=au)])
expect_infixes = (cc.LIST_ELLIPSES + cc.LIST_ICONS
                  + [r"(?<=[0-9])[+\-\*^](?=[0-9-])", r"(?<=[{al}{q}])\.(?=[{au}{q}])".format(al=al, au=au, q=q),
                     r"(?<=[{a}]),(?=[{a}])".format(a=a), r"(?<=[{a}0-9])(?:{h})(?=[{a}])".format(a=a, h=cc.HYPHENS),
                     r"(?<=[{a}0-9])[:<>=/](?=[{a}])".format(a=a)])
assert list(D.prefixes) == expect_prefixes, "spaCy's English prefixes changed"
assert list(D.suffixes) == expect_suffixes, "spaCy's English suffixes changed"
assert list(D.infixes) == expect_infixes, "spaCy's English infixes changed"
assert D.token_match is None
assert cc.HYPHENS == "-|–|—|--|---|——|~"
assert nlp.tokenizer.faster_heuristics

ICONS_RE = "[%s]" % cc.ICONS
PREFIX_LITERALS = [p for p in (["§", "%", "=", "—", "–"] + cc.LIST_PUNCT + cc.LIST_QUOTES + cc.LIST_CURRENCY)
                   if p.strip()]
PREFIX_LITERALS = [re.sub(r"\\(.)", r"\1", p) for p in PREFIX_LITERALS]
SUFFIX_LITERALS = [re.sub(r"\\(.)", r"\1", p) for p in cc.LIST_PUNCT + ["…"] + cc.LIST_QUOTES
                   + ["'s", "'S", "’s", "’S", "—", "–"] if p.strip()]
CURRENCY = [re.sub(r"\\(.)", r"\1", p) for p in cc.CURRENCY.split("|") if p]
UNITS = [p for p in cc.UNITS.split("|") if p]
icons = re.compile(ICONS_RE)
for p in PREFIX_LITERALS:
    assert p[0] not in ".+" and not icons.match(p[0]), p
for p in PREFIX_LITERALS + SUFFIX_LITERALS + CURRENCY + UNITS:
    assert re.escape(p) == p or True

CLASSES = [
    ("kAlpha", "[%s]" % a, "[{ALPHA}]"),
    ("kAlphaLower", "[%s]" % al, "[{ALPHA_LOWER}]"),
    ("kAlphaUpper", "[%s]" % au, "[{ALPHA_UPPER}]"),
    ("kAlphaLowerOrQuote", "[%s%s]" % (al, q), "[{ALPHA_LOWER}{CONCAT_QUOTES}]"),
    ("kAlphaUpperOrQuote", "[%s%s]" % (au, q), "[{ALPHA_UPPER}{CONCAT_QUOTES}]"),
    ("kIcon", ICONS_RE, "[{ICONS}]"),
    ("kSuffixDotBehind", SUFFIX_DOT_BEHIND, "[0-9{ALPHA_LOWER}%%\u00b2-+{PUNCT}(?:{CONCAT_QUOTES})], before a suffix '.'"),
]


def ranges(pattern):
    rx = re.compile(pattern)
    out, lo = [], None
    for cp in range(0x110000):
        hit = rx.match(chr(cp)) is not None
        if hit and lo is None:
            lo = cp
        elif not hit and lo is not None:
            out.append((lo, cp - 1))
            lo = None
    if lo is not None:
        out.append((lo, 0x10FFFF))
    return out


def ranges_of_set(chars):
    cps = sorted(ord(c) for c in chars)
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


def c_string(s):
    out = []
    for b in s.encode("utf-8"):
        if 0x20 <= b < 0x7F and chr(b) not in '"\\?':
            out.append(chr(b))
        else:
            out.append("\\%03o" % b)
    return '"' + "".join(out) + '"'


def emit_ranges(name, rs, what):
    w = sys.stdout.write
    w("// %s\n" % what)
    w("inline constexpr CodeRange %s[] = {\n" % name)
    line = "   "
    for lo, hi in rs:
        item = " {0x%X, 0x%X}," % (lo, hi)
        if len(line) + len(item) > 118:
            w(line + "\n")
            line = "   "
        line += item
    w(line + "\n};\n\n")


def emit_strings(name, items, what):
    w = sys.stdout.write
    w("// %s\n" % what)
    w("inline constexpr std::string_view %s[] = {\n" % name)
    line = "   "
    for s in items:
        item = " %s," % c_string(s)
        if len(line) + len(item) > 118:
            w(line + "\n")
            line = "   "
        line += item
    w(line + "\n};\n\n")


w = sys.stdout.write
w("// Generated by tests/e2e/curate/curate_spacy_tables.py from spaCy %s (spacy.blank(\"en\")) and\n" % spacy.__version__)
w("// datatrove.utils.text; do not edit. Included by text_stats.cc and spacy_tokenizer.cc.\n")
w("// clang-format off\n")
w("#pragma once\n\n")
w("namespace claw::curate::tables {\n\n")
w("struct CodeRange { char32_t lo, hi; };\n\n")
for name, pattern, what in CLASSES:
    emit_ranges(name, ranges(pattern), "spaCy's " + what.replace("\\", "U+"))
emit_ranges("kSentencizerPunct", ranges_of_set(Sentencizer.default_punct_chars), "Sentencizer.default_punct_chars")
emit_ranges("kDatatrovePunctuation", ranges_of_set(PUNCTUATION_SET), "datatrove PUNCTUATION_SET")
emit_ranges("kDatatroveTerminal", ranges_of_set(TERMINAL_PUNCTUATION), "datatrove TERMINAL_PUNCTUATION")
emit_strings("kPrefixLiterals", PREFIX_LITERALS, "literal prefixes in the order of the prefix regex")
emit_strings("kSuffixLiterals", SUFFIX_LITERALS, "literal suffixes")
emit_strings("kCurrency", CURRENCY, "currency suffixes after a digit")
emit_strings("kUnits", UNITS, "unit suffixes after a digit")

# Special cases: the key, and its tokens joined by \037.
rules = nlp.tokenizer.rules
w("// tokenizer special cases: the string, its tokens joined by \\037\n")
w("struct SpecialCase { std::string_view text, tokens; };\n")
w("inline constexpr SpecialCase kSpecialCases[] = {\n")
for key in sorted(rules):
    pieces = [d[ORTH] for d in rules[key]]
    assert "".join(pieces) == key
    w("    {%s, %s},\n" % (c_string(key), c_string("\x1f".join(pieces))))
w("};\n\n")
w("}  // namespace claw::curate::tables\n")
w("// clang-format on\n")
