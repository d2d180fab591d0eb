#!/usr/bin/env python3
"""The layer order of src/claw (docs/architecture.md, "Layers"): a file of
layer L includes headers of L itself and of layers of a lower rank only.

    tools/check_layers.py --ranks core=0,kernels=1,... [--stamp FILE] SRC_DIR

SRC_DIR is src/claw. Prints each upward include as
`path:line: <layer> (rank r) includes claw/<other>/ (rank s)` and exits 1
if there is one; else writes --stamp (the build's proof that it ran). The
build runs it on every change of a source (src/claw/CMakeLists.txt), which
also checks that each layer's library links only downward.
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"claw/([a-z_0-9]+)/')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", required=True, help="layer=rank pairs, separated by spaces or commas")
    ap.add_argument("--stamp")
    ap.add_argument("src")
    a = ap.parse_args()
    ranks = {}
    for pair in re.split(r"[;,\s]+", a.ranks.strip()):
        name, rank = pair.split("=")
        ranks[name] = int(rank)
    bad = []
    for layer in sorted(os.listdir(a.src)):
        top = os.path.join(a.src, layer)
        if not os.path.isdir(top):
            continue
        if layer not in ranks:
            bad.append(f"{top}: a directory of src/claw that is no layer (add it to CLAW_LAYER_RANKS)")
            continue
        for dirpath, _, files in os.walk(top):
            for f in sorted(files):
                if not f.endswith((".h", ".cc", ".cu", ".cuh", ".inc", ".in")):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) == layer:
                            continue
                        other = m.group(1)
                        if other not in ranks:
                            bad.append(f"{path}:{n}: includes claw/{other}/, which is no layer")
                        elif ranks[other] >= ranks[layer]:
                            bad.append(f"{path}:{n}: {layer} (rank {ranks[layer]}) includes claw/{other}/ "
                                       f"(rank {ranks[other]}): a layer includes only the layers below it")
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} upward include(s): move the code down, or the caller up (docs/architecture.md)")
        return 1
    if a.stamp:
        with open(a.stamp, "w") as fh:
            fh.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
