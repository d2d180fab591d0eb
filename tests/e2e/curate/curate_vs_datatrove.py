#!/usr/bin/env python3
"""The heuristic filters of `claw curate` against datatrove 0.10.1's.

  /tmp/claw-curate-venv/bin/python tests/e2e/curate/curate_vs_datatrove.py --driver BUILD/curate_filter_driver

Builds a few thousand documents from data/sotu/*.txt (State of the Union
addresses: cut into sentences, grouped into paragraphs, joined into
documents of one sentence to whole addresses, some of them edited so that
each rule of each filter fires: repeated lines and paragraphs, bullets,
ellipses, hashes, citations, "javascript", cookie notices, lorem ipsum,
curly brackets, short lines, number tables, over-long words, other line
breaks) plus synthetic web boilerplate (menus, link lists, shop listings,
code, tweets), and adds --package-docs documents of another public corpus
that packages ship: Debian's package documentation under /usr/share/doc
(licences, READMEs, changelogs). Runs datatrove's GopherQualityFilter, GopherRepetitionFilter,
C4QualityFilter and FineWebQualityFilter with their defaults, and the C++
stages through tests/e2e/curate/curate_filter_driver.cc, and prints per filter
the documents kept and dropped by each and every disagreement (decision or
reason; for c4_quality also the rewritten text of a kept document).

Also measures the word split against spaCy's (datatrove's split_into_words)
and the sentence split, and the speed of both sides (documents per second,
one thread; bench/drivers/bench_curate.py is the benchmark). datatrove's splits are
computed once per text and shared by the filters (computed_once), and spaCy
keeps its caches between texts (datatrove's memory zones are not entered),
so its speed here is above what datatrove runs at.

Pass criterion: every filter's decisions and reasons agree on every
document (agreement 1.0, --min-agreement), the C4 texts too. The word split
may differ on a few documents (a rarer spaCy path than these texts hit);
what matters is that it changes no decision.
"""
import argparse
import collections
import contextlib
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import spacy.language
from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
import datatrove.pipeline.filters.c4_filters as dt_c4
import datatrove.pipeline.filters.fineweb_quality_filter as dt_fineweb
import datatrove.pipeline.filters.gopher_quality_filter as dt_gopher_quality
import datatrove.pipeline.filters.gopher_repetition_filter as dt_gopher_repetition
from datatrove.utils import text as dt_text
from datatrove.utils.typeshelper import Languages


def computed_once(split):
    """datatrove's split as a pure function of (text, language), each result
    computed once: the word split runs over the same documents in the
    comparison of the split itself and in three of the filters, spaCy's
    tokenizer being most of the oracle's time. Every caller gets a list of
    its own (a filter may edit what it is handed)."""
    done = {}

    def once(text, language=Languages.english):
        if (text, language) not in done:
            done[text, language] = split(text, language)
        return list(done[text, language])

    return once


# datatrove runs each spaCy call in a memory zone of its own (a bound on a
# long job's memory): every word's lexeme and every cached affix split is
# dropped after each text and built again for the next, which was most of the
# oracle's time. The tokens are the same either way (the zone frees caches,
# it changes no rule), so here, one short process, the caches live on.
spacy.language.Language.memory_zone = lambda self, mem=None: contextlib.nullcontext()

split_into_words = computed_once(dt_text.split_into_words)
split_into_sentences = computed_once(dt_text.split_into_sentences)
for module in (dt_text, dt_gopher_quality, dt_gopher_repetition, dt_fineweb):
    module.split_into_words = split_into_words
for module in (dt_text, dt_c4):
    module.split_into_sentences = split_into_sentences

REPO = Path(__file__).resolve().parents[3]
FILTERS = {
    "gopher_quality": GopherQualityFilter,
    "gopher_repetition": GopherRepetitionFilter,
    "c4_quality": C4QualityFilter,
    "fineweb_quality": FineWebQualityFilter,
}

# --------------------------------------------------------------------------
# Documents

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"“A-Z0-9])")


def sentences_of(text):
    return [s for s in SENTENCE_END.split(text.strip()) if s]


BOILERPLATE = [
    "Home | About Us | Contact | Careers | Press | Blog",
    "Skip to main content",
    "This website uses cookies to improve your experience. By continuing you accept our Cookie Policy.",
    "Please enable JavaScript in your browser to view this page.",
    "Copyright © 2023 Example Corp. All rights reserved. Terms of Use | Privacy Policy",
    "Subscribe to our newsletter!",
    "Share this: Facebook Twitter LinkedIn Email",
    "Read more...",
    "Click here to download the full report…",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
    "function init() { return window.location.href; }",
    "#breaking #news #politics #usa",
    "Posted by admin at 10:42 AM | 3 comments",
    "Price: $19.99 (was $24.99) — free shipping on orders over $50!",
    "Visit https://www.example.com/page?id=42&ref=home or email info@example.com for details.",
    "Tags: economy, jobs, taxes, congress",
    "- Item one",
    "• Item two",
    "Q3 2022 | 1,234 | 5,678 | 9.1% | -0.4%",
    "Log in | Register | Forgot password?",
]

TWEETS = [
    "Can't believe it's already Friday :) #TGIF @friend check this out https://t.co/abc123",
    "I'm sooo tired... gonna sleep lol :-( see u tmrw",
    "RT @news: BREAKING — Senate passes the bill 51–49!!! #vote",
    "Who's coming tonight? We'll be at Joe's Bar (5th Ave.) around 8p.m. <3",
    "10km run done in 45min, avg pace 4:30/km... 💪🏃‍♂️",
    "U.S. GDP grew 2.3% in Q2; the Fed's rate is 5.25–5.5%. Thoughts?",
    "Don't forget: the meeting's at 10a.m. in Rm. 204, e.g. the one near Dr. Smith's office.",
    "Email me at john.doe@mail.example.org or call +1-555-0100 ext. 22.",
    "The café’s crème brûlée costs €7,50 — naïve coöperation ftw!",
    "wait... what?!? no way!!! :D :P ;) xD",
]


def mutate(rng, lines, para_sep):
    """Edits a document's lines so that some rule fires (or nearly fires)."""
    kind = rng.choice(
        [
            "repeat_line",
            "repeat_para",
            "bullets",
            "ellipsis",
            "hashes",
            "citations",
            "javascript",
            "policy",
            "lorem",
            "curly",
            "short_lines",
            "numbers",
            "long_word",
            "line_breaks",
            "boilerplate",
            "no_punct",
            "upper",
            "ngram_repeat",
        ]
    )
    if kind == "repeat_line" and lines:
        line = rng.choice(lines)
        for _ in range(rng.randint(1, 6)):
            lines.insert(rng.randrange(len(lines) + 1), line)
    elif kind == "repeat_para" and lines:
        lines.extend(lines[: rng.randint(1, len(lines))])
    elif kind == "bullets":
        marker = rng.choice(["- ", "• ", "  - ", "-", "•\t"])
        share = rng.random()
        lines[:] = [marker + l if rng.random() < share else l for l in lines]
    elif kind == "ellipsis":
        share = rng.random() * 0.8
        lines[:] = [(l.rstrip(".!?") + rng.choice(["...", "…", "....", " ..."])) if rng.random() < share else l
                    for l in lines]
    elif kind == "hashes":
        lines.append(" ".join("#tag%d" % i for i in range(rng.randint(1, 40))))
    elif kind == "citations":
        lines[:] = [l + rng.choice(["[1]", "[23]", "[edit]", "[citation needed]", " [4]", "[]", "[x]", "[١٢]"])
                    if rng.random() < 0.5 else l for l in lines]
    elif kind == "javascript":
        lines.insert(rng.randrange(len(lines) + 1), "You need to enable JavaScript to run this app.")
    elif kind == "policy":
        lines.insert(rng.randrange(len(lines) + 1),
                     rng.choice(["We use cookies on this site.", "Read our privacy policy.", "See the Terms of Use.",
                                 "This site uses coo\u212aies."]))  # Kelvin sign: lowers to 'k'
    elif kind == "lorem":
        lines.insert(rng.randrange(len(lines) + 1), "Lorem Ipsum is simply dummy text of the printing industry.")
    elif kind == "curly":
        lines.insert(rng.randrange(len(lines) + 1), "The set {a, b, c} has three elements.")
    elif kind == "short_lines":
        for _ in range(rng.randint(1, 30)):
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(["Menu", "Home", "News", "Section %d" % rng.randint(1, 9),
                                                                    "Top", "Contact us", "2023"]))
    elif kind == "numbers":
        for _ in range(rng.randint(1, 20)):
            lines.append(" | ".join(str(rng.randint(0, 99999)) for _ in range(rng.randint(2, 8))))
    elif kind == "long_word":
        lines.insert(rng.randrange(len(lines) + 1), "See " + "x" * rng.choice([999, 1000, 1001, 1500]) + " here.")
    elif kind == "line_breaks":
        sep = rng.choice(["\r\n", "\r", "\x0b", "\x0c", "\u2028", "\x1c", "\x85", "\n \n", "\n\t\n"])
        return sep.join(lines)
    elif kind == "boilerplate":
        for _ in range(rng.randint(1, 8)):
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(BOILERPLATE))
    elif kind == "no_punct":
        lines[:] = [l.rstrip(".!?") for l in lines]
    elif kind == "upper":
        lines[:] = [l.upper() if rng.random() < 0.7 else l for l in lines]
    elif kind == "ngram_repeat" and lines:
        words = rng.choice(lines).split()
        if len(words) > 4:
            k = rng.randint(2, min(10, len(words)))
            start = rng.randrange(len(words) - k + 1)
            gram = " ".join(words[start:start + k])
            lines.append(" ".join([gram] * rng.randint(2, 12)))
    return para_sep.join(lines)


def synthetic(rng, i):
    kind = rng.choice(["boilerplate", "tweets", "links", "shop", "code", "table", "list", "mixed"])
    if kind == "boilerplate":
        lines = [rng.choice(BOILERPLATE) for _ in range(rng.randint(3, 40))]
    elif kind == "tweets":
        lines = [rng.choice(TWEETS) for _ in range(rng.randint(3, 30))]
    elif kind == "links":
        lines = ["https://www.site%d.com/%s/page-%d.html" % (rng.randint(1, 5), rng.choice(["news", "blog"]), k)
                 for k in range(rng.randint(3, 30))]
    elif kind == "shop":
        lines = ["%s - $%d.%02d - %s" % (rng.choice(["Blue shirt", "Red shoes", "Hat", "Socks (3-pack)"]),
                                          rng.randint(1, 200), rng.randint(0, 99),
                                          rng.choice(["In stock.", "Sold out!", "Only 2 left...", "Ships in 3-5 days."]))
                 for _ in range(rng.randint(3, 40))]
    elif kind == "code":
        lines = ["def f%d(x):" % k if k % 3 == 0 else "    return {'a': x + %d}" % k for k in range(rng.randint(3, 30))]
    elif kind == "list":  # short distinct lines, some over 30 characters: list_ratio with "\n\n"
        vocab = ["Pennsylvania", "Massachusetts", "Connecticut", "agriculture", "manufactures", "navigation",
                 "revenue", "treaty", "tariff", "currency", "railroads", "territories", "pensions", "harbors"]
        lines = [" ".join(rng.sample(vocab, rng.randint(1, 4))) + rng.choice([".", "", ";", "!"])
                 for _ in range(rng.randint(3, 40))]
    elif kind == "table":
        lines = [" ".join(str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in range(rng.randint(2, 10)))
                 for _ in range(rng.randint(3, 40))]
    else:
        lines = [rng.choice(BOILERPLATE + TWEETS) for _ in range(rng.randint(5, 60))]
    return {"id": "syn-%d-%s" % (i, kind), "text": rng.choice(["\n", "\n\n", " "]).join(lines)}


def make_docs(sotu, seed, count):
    rng = random.Random(seed)
    # The speeches as scripts/fetch-data unpacks them (data/sotu.jsonl is the
    # same texts, but made only when a command first needs the corpus).
    addresses = [{"text": p.read_text(encoding="utf-8")} for p in sorted(sotu.glob("*.txt"))]
    if not addresses:
        sys.exit(f"no speeches in {sotu} (scripts/fetch-data)")
    docs = []
    # Whole addresses (long documents), every fifth one.
    for k, a in enumerate(addresses[::5]):
        docs.append({"id": "address-%d" % k, "text": a["text"]})
    paragraphs = []
    for a in addresses:
        sents = sentences_of(a["text"])
        i = 0
        while i < len(sents):
            n = rng.choice([1, 1, 2, 3, 3, 4, 5, 6, 8])
            paragraphs.append(" ".join(sents[i:i + n]))
            i += n
    k = 0
    while len(docs) < count:
        k += 1
        if rng.random() < 0.12:
            docs.append(synthetic(rng, k))
            continue
        n = rng.choice([1, 1, 2, 3, 4, 6, 8, 12, 20, 40])
        start = rng.randrange(len(paragraphs))
        lines = paragraphs[start:start + n]
        if rng.random() < 0.3:  # paragraphs cut into lines
            lines = [s for p in lines for s in sentences_of(p)]
        sep = rng.choice(["\n\n", "\n", "\n", " \n"])
        text = mutate(rng, lines, sep) if rng.random() < 0.6 else sep.join(lines)
        if rng.random() < 0.1:
            text = rng.choice(["  ", "\n", "\t", "\u00a0"]) + text + rng.choice(["\n", "  ", "\n\n", ""])
        docs.append({"id": "sotu-%d" % k, "text": text})
    # Edge cases.
    edge = ["", " ", "\n\n\n", "a", "#", "...", "The end.", "the be to of and that have with " * 8,
            "- a\n- b\n- c", "x\n" * 60, "Hello world.\r\n" * 3, "{ }", "[edit]", "a" * 2000,
            "The nation is strong and the people are free. " * 11200]  # over 100000 words: gopher_long_doc
    for j, t in enumerate(edge):
        docs.append({"id": "edge-%d" % j, "text": t})
    return docs


def package_docs(root, limit):
    """Another public corpus that packages ship: the documentation Debian
    installs under /usr/share/doc (copyright files, READMEs, NEWS and
    changelogs, gzip or plain), in path order, the first `limit` non-empty
    ones, each cut to 100 kB at a line end. Licence texts, changelog lists
    and READMEs are the kind of boilerplate the filters are for."""
    import gzip
    docs = []
    names = ("copyright", "README", "NEWS", "changelog")
    for path in sorted(Path(root).glob("*/*")):
        if len(docs) >= limit:
            break
        if not path.is_file() or not path.name.startswith(names):
            continue
        raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
        text = raw.decode("utf-8", errors="replace")[:100_000]
        if len(text) == 100_000:
            text = text[:text.rfind("\n") + 1]
        if text.strip():
            docs.append({"id": "doc:" + str(path.relative_to(root)), "text": text})
    return docs


def token_soup(seed, count):
    """Short strings glued from the pieces spaCy's tokenizer treats specially
    (affixes, special cases, emoticons, URLs, units, other scripts), for the
    word and sentence split only."""
    import spacy

    keys = [k for k in spacy.blank("en").tokenizer.rules if not k.isspace()]
    rng = random.Random(seed)
    pieces = ["a", "Mr", "U", "S", "the", "don", "t", "'", "’", '"', "“", ".", ",", ":", ";", "!", "?", "(", ")", "[",
              "{", "-", "--", "—", "~", "/", "=", "<", "+", "*", "^", "&", "#", "%", "$", "US$", "€", "°", "F", "km",
              "0", "1", "10", "3.5", "...", "…", "http://", "www", "com", "@", "_", "é", "ß", "Σ", "ж", "中", "😀",
              "©", "§", "¿", "n't", "'s", "A", "B", "Z", "x", "١", "ー", "、", "。", "？", "\u00a0", "\n", "  ", "\t"]
    docs = []
    for i in range(count):
        n = rng.randint(1, 20)
        text = "".join(rng.choice(keys) if rng.random() < 0.3 else rng.choice(pieces) if rng.random() < 0.85 else " "
                       for _ in range(n))
        docs.append({"id": "soup-%d" % i, "text": text})
    return docs


# --------------------------------------------------------------------------
# Running both sides


def run_datatrove(kind, docs):
    f = FILTERS[kind]()
    out = []
    t0 = time.perf_counter()
    for d in docs:
        doc = Document(text=d["text"], id=d["id"])
        try:
            r = f.filter(doc)
        except ZeroDivisionError:
            out.append(("error:ZeroDivisionError", None))
            continue
        keep, reason = (r, None) if not isinstance(r, tuple) else r
        out.append(("keep", doc.text) if keep else (reason or "drop", None))
    return out, time.perf_counter() - t0


def run_driver(driver, kind, docs, extra=()):
    stdin = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs)
    p = subprocess.run([driver, kind, *extra], input=stdin.encode(), capture_output=True, check=True)
    rows = p.stdout.decode().split("\n")[:-1]  # not splitlines: JSON leaves U+2028 and U+0085 raw
    assert len(rows) == len(docs), (len(rows), len(docs))
    m = re.search(r"in ([0-9.]+) s of filtering", p.stderr.decode())
    return rows, float(m.group(1)) if m else float("nan")


def short(text, n=160):
    t = json.dumps(text, ensure_ascii=False)
    return t if len(t) <= n else t[: n - 3] + "..."


def compare_filter(driver, kind, docs, show):
    ours_rows, ours_s = run_driver(driver, kind, docs, ["--print-text"] if kind == "c4_quality" else [])
    theirs, theirs_s = run_datatrove(kind, docs)
    disagree = 0
    kept = [0, 0]
    reasons = collections.Counter(r for r, _ in theirs if r != "keep")
    for d, row, (t_res, t_text) in zip(docs, ours_rows, theirs):
        parts = row.split("\t", 2)
        o_res = parts[1]
        o_text = json.loads(parts[2]) if len(parts) > 2 else None
        kept[0] += t_res == "keep"
        kept[1] += o_res == "keep"
        same = o_res == t_res and (kind != "c4_quality" or o_res != "keep" or o_text == t_text)
        if not same:
            disagree += 1
            if disagree <= show:
                print("  DIFF %s: datatrove %s, claw %s; text %s" % (d["id"], t_res, o_res, short(d["text"])))
                if o_res == t_res == "keep":
                    print("       kept text: datatrove %s\n                  claw      %s" % (short(t_text), short(o_text)))
    n = len(docs)
    print("%-18s datatrove kept %4d dropped %4d | claw kept %4d dropped %4d | disagreements %d | agreement %.4f"
          % (kind, kept[0], n - kept[0], kept[1], n - kept[1], disagree, 1 - disagree / n))
    print("%-18s datatrove's reasons: %s" % ("", ", ".join("%s %d" % kv for kv in sorted(reasons.items()))))
    print("%-18s speed: datatrove %.0f docs/s (its word and sentence splits computed once for every filter), "
          "claw %.0f docs/s" % ("", n / theirs_s, n / ours_s))
    return disagree, n


def compare_split(driver, docs, kind, show):
    rows, ours_s = run_driver(driver, kind, docs)
    fn = split_into_words if kind == "words" else split_into_sentences
    t0 = time.perf_counter()
    theirs = [fn(d["text"]) for d in docs]
    theirs_s = time.perf_counter() - t0
    docs_diff = items_diff = items = 0
    shown = 0
    for d, row, t in zip(docs, rows, theirs):
        o = json.loads(row.split("\t", 1)[1])
        items += len(t)
        if o != t:
            docs_diff += 1
            # Items in one list and not the other, by position of first difference.
            i = next(k for k in range(min(len(o), len(t)) + 1) if k >= min(len(o), len(t)) or o[k] != t[k])
            items_diff += abs(len(o) - len(t)) or 1
            if shown < show:
                shown += 1
                print("  %s DIFF %s at %d: spaCy %s, claw %s" % (kind, d["id"], i, t[i:i + 5], o[i:i + 5]))
    print("%-18s %d of %d documents differ (%d of %d %s); speed: datatrove %.0f docs/s, claw %.0f docs/s"
          % (kind, docs_diff, len(docs), items_diff, items, "tokens" if kind == "words" else "sentences",
             len(docs) / theirs_s, len(docs) / ours_s))
    return docs_diff


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", required=True, help="curate_filter_driver binary")
    ap.add_argument("--sotu", default=str(Path(os.environ.get("CLAW_DATA_DIR", REPO / "data")) / "sotu"),
                    help="the directory of State of the Union speeches (*.txt)")
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", type=int, default=30, help="disagreements printed per filter")
    ap.add_argument("--min-agreement", type=float, default=1.0,
                    help="fail when a filter agrees on a smaller fraction of documents")
    ap.add_argument("--filters", default=",".join(FILTERS))
    ap.add_argument("--soup", type=int, default=5000, help="adversarial strings for the word and sentence split")
    ap.add_argument("--dump", help="write the documents as JSONL here")
    ap.add_argument("--package-docs", type=int, default=600,
                    help="documents from /usr/share/doc (Debian's package documentation) added to the corpus")
    ap.add_argument("--package-doc-root", default="/usr/share/doc")
    args = ap.parse_args()

    docs = make_docs(Path(args.sotu), args.seed, args.docs)
    extra = package_docs(args.package_doc_root, args.package_docs) if args.package_docs else []
    print("%d State of the Union documents, %d from %s" % (len(docs), len(extra), args.package_doc_root))
    docs += extra
    if args.dump:
        Path(args.dump).write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
    print("%d documents, %.1f MB" % (len(docs), sum(len(d["text"].encode()) for d in docs) / 1e6))
    compare_split(args.driver, docs, "words", args.show)
    compare_split(args.driver, docs, "sentences", args.show)
    if args.soup:
        soup = token_soup(args.seed, args.soup)
        print("%d adversarial strings:" % len(soup))
        compare_split(args.driver, soup, "words", args.show)
        compare_split(args.driver, soup, "sentences", args.show)
    failed = []
    for kind in args.filters.split(","):
        disagree, n = compare_filter(args.driver, kind, docs, args.show)
        if 1 - disagree / n < args.min_agreement:
            failed.append(kind)
    if failed:
        print("FAIL: agreement below %.4f for %s" % (args.min_agreement, ", ".join(failed)))
        return 1
    print("OK: every filter agrees with datatrove on at least %.4f of %d documents" % (args.min_agreement, len(docs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
