#!/usr/bin/env python3
"""The test suite's cost report, from ctest's own records of one run.

    test_cost.py BUILD_DIR JUNIT [--phases FILE]

Reads the run's JUnit file (ctest --output-junit: every test's seconds and
status) and `ctest --show-only=json-v1` (each test's tier label and
PROCESSORS), and prints: the run's totals, each tier's tests, seconds and
seconds x processors, the phases of the sanitizer tier (the lines
scripts/test-sanitize prints, captured in the JUnit file), and the 25
slowest tests. --phases names a file of "phase seconds" lines that
scripts/test wrote (configure + build, ctest's wall time).
"""
import argparse
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

TIERS = ("unit", "mpi", "oracle", "slow", "sanitize", "cuda")


def tests_info(build_dir):
    out = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"], check=True,
                         capture_output=True, text=True).stdout
    info = {}
    for t in json.loads(out)["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        labels = props.get("LABELS", [])
        tier = next((l for l in labels if l in TIERS), "(none)")
        info[t["name"]] = (tier, int(props.get("PROCESSORS", 1)))
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_dir")
    ap.add_argument("junit")
    ap.add_argument("--phases", help="file of 'phase seconds' lines")
    a = ap.parse_args()

    root = ET.parse(a.junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    info = tests_info(a.build_dir)
    rows = []  # (seconds, name, tier, processors, status)
    sanitize_lines = []
    for case in suite.iter("testcase"):
        name, status = case.get("name"), case.get("status")
        secs = float(case.get("time") or 0)
        tier, procs = info.get(name, ("(none)", 1))
        rows.append((secs, name, tier, procs, status))
        if tier == "sanitize":
            text = case.findtext("system-out") or ""
            sanitize_lines += [l.strip() for l in text.splitlines() if l.startswith("test-sanitize: ")]

    lines = []
    stamp = suite.get("timestamp", "")
    failed = [r for r in rows if r[4] not in ("run", "notrun", "disabled")]
    not_run = [r for r in rows if r[4] in ("notrun", "disabled")]
    total = sum(r[0] for r in rows)
    lines.append(f"claw test cost: run of {stamp}, {len(rows)} tests, {len(failed)} failed, "
                 f"{len(not_run)} not run")
    if a.phases:
        for line in open(a.phases):
            parts = line.split()
            if len(parts) == 2:
                lines.append(f"  {parts[0]:<28} {float(parts[1]):8.0f} s")
    lines.append(f"  {'sum of test times':<28} {total:8.0f} s")
    lines.append("")
    lines.append(f"{'tier':<10} {'tests':>6} {'seconds':>9} {'s x proc':>9}")
    for tier in TIERS + ("(none)",):
        sel = [r for r in rows if r[2] == tier]
        if not sel:
            continue
        lines.append(f"{tier:<10} {len(sel):6d} {sum(r[0] for r in sel):9.0f} {sum(r[0] * r[3] for r in sel):9.0f}")
    if sanitize_lines:
        lines.append("")
        lines.append("sanitizer tier phases (scripts/test-sanitize):")
        lines += ["  " + l[len("test-sanitize: "):] for l in sanitize_lines]
    lines.append("")
    lines.append("25 slowest tests:")
    for k, (secs, name, tier, procs, status) in enumerate(sorted(rows, reverse=True)[:25], 1):
        mark = "" if status == "run" else f"  [{status}]"
        lines.append(f"  {k:2d}. {secs:7.1f} s  {name:<48} {tier:<8} x{procs}{mark}")
    if failed:
        lines.append("")
        lines.append("failed: " + ", ".join(r[1] for r in failed))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
