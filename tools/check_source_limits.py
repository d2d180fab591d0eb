#!/usr/bin/env python3
"""The source tree's size limits: no file over --max-file-lines lines and no
function body over --max-function-lines lines under src/ (a function: a
brace block opened at namespace or class scope, found by counting braces
outside comments, strings and character literals).

    tools/check_source_limits.py [--max-file-lines 800] [--max-function-lines 120] [--baseline F] [ROOT]

Prints each offender as `path:line: N lines (what)` and exits 1 if any.
--baseline F: the offenders still being split up, one `path count` line
each (count: the file's functions over the limit; `path file` for a file
over the limit). Only offenders beyond it fail, and so does an entry the
code has outgrown (the baseline only shrinks).
"""
import argparse
import os
import re
import sys

WORD = re.compile(r"\b(namespace|class|struct|union|enum)\b")


def code_only(src):
    """src with comments, strings and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif c == '"' and i > 0 and src[i - 1] == "R" and (m := re.match(r'"([^(\s]*)\(', src[i:i + 20])):
            end = src.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * src.count("\n", i, end))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def without_directives(text):
    """Preprocessor lines (and their continuations) blanked, newlines kept."""
    out, cont = [], False
    for line in text.split("\n"):
        directive = cont or line.lstrip().startswith("#")
        cont = directive and line.endswith("\\")
        out.append("" if directive else line)
    return "\n".join(out)


def functions(path):
    """(first line, lines) of each function body in the file."""
    text = without_directives(code_only(open(path, encoding="utf-8", errors="replace").read()))
    stack, head, line = [], [], 1
    for c in text:
        if c == "\n":
            line += 1
        if c == "{":
            h = "".join(head)
            kind = "scope" if WORD.search(h) and "(" not in h.split("=")[0] else "body"
            if kind == "body" and all(k == "scope" for k, _ in stack):
                kind = "function"
            stack.append((kind, line))
            head = []
        elif c == "}":
            if stack:
                kind, start = stack.pop()
                if kind == "function":
                    yield start, line - start + 1
            head = []
        elif c == ";":
            head = []
        else:
            head.append(c)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "src"))
    ap.add_argument("--max-file-lines", type=int, default=800)
    ap.add_argument("--max-function-lines", type=int, default=120)
    ap.add_argument("--baseline", help="offenders still allowed (see above)")
    a = ap.parse_args()
    bad = []
    for d, _, files in sorted(os.walk(a.root)):
        for f in sorted(files):
            if not f.endswith((".cc", ".h", ".cu", ".cuh")):
                continue
            p = os.path.join(d, f)
            rel = os.path.relpath(p, os.path.dirname(os.path.abspath(a.root)))
            n = sum(1 for _ in open(p, encoding="utf-8", errors="replace"))
            if n > a.max_file_lines:
                bad.append(f"{rel}:1: {n} lines (file; limit {a.max_file_lines})")
            for start, length in functions(p):
                if length > a.max_function_lines:
                    bad.append(f"{rel}:{start}: {length} lines (function; limit {a.max_function_lines})")
    for b in bad:
        print(b)
    if not a.baseline:
        return 1 if bad else 0
    allowed = {}
    for line in open(a.baseline):
        line = line.split("#")[0].split()
        if line:
            allowed[(line[0], line[1] == "file")] = 1 if line[1] == "file" else int(line[1])
    found = {}
    for b in bad:
        path, kind = b.split(":")[0], "(file;" in b
        found[(path, kind)] = found.get((path, kind), 0) + 1
    status = 0
    for key, n in sorted(found.items()):
        if n > allowed.get(key, 0):
            print(f"FAIL {key[0]}: {n} {'file' if key[1] else 'functions'} over the limit, the baseline allows "
                  f"{allowed.get(key, 0)}")
            status = 1
    for key, n in sorted(allowed.items()):
        if found.get(key, 0) < n:
            print(f"FAIL {a.baseline}: {key[0]} allows {n}, the code has {found.get(key, 0)}: lower the baseline")
            status = 1
    print(f"{len(bad)} offenders, {sum(allowed.values())} in the baseline" + ("" if status else ": ok"))
    return status


if __name__ == "__main__":
    sys.exit(main())
