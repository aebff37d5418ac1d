#!/usr/bin/env python3
"""ARCHITECTURE.md's "Where the hot code lives" table holds true: every
function it names is defined in one of the files its row gives (a name
ending in * stands for every function with that prefix, at least one).
usage: arch_map_test.py SOURCE_ROOT"""
import os
import re
import sys


def rows(text):
    sec = text.split("## Where the hot code lives", 1)
    if len(sec) < 2:
        sys.exit("ARCHITECTURE.md has no 'Where the hot code lives' section")
    for line in sec[1].splitlines():
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`([A-Za-z_][A-Za-z0-9_]*\*?)`", cells[0])
        files = [f.strip() for f in cells[1].split(",") if f.strip()]
        yield line, names, files


def defined(name, src):
    """name is defined in src: a function definition (its name followed by
    '(' after a return type or at a line's start, then a body), a macro, or
    a type"""
    stem = re.escape(name.rstrip("*")) + (r"[A-Za-z0-9_]*" if name.endswith("*") else r"\b")
    fn = re.compile(r"(^|[\s*])" + stem + r"\s*\([^;{]*\)\s*(__attribute__\(\([^)]*\)\)\s*)*\{", re.M)
    mac = re.compile(r"^#define\s+" + stem, re.M)
    typ = re.compile(r"\}\s*" + stem + r"\s*;", re.M)
    return any(p.search(src) for p in (fn, mac, typ))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    text = open(os.path.join(root, "ARCHITECTURE.md"), encoding="utf-8").read()
    bad, checked = [], 0
    for line, names, files in rows(text):
        srcs = []
        for f in files:
            p = os.path.join(root, f)
            if not os.path.isfile(p):
                bad.append(f"{f}: no such file (row: {line.strip()[:80]})")
                continue
            srcs.append(open(p, encoding="utf-8").read())
        for n in names:
            checked += 1
            if srcs and not any(defined(n, s) for s in srcs):
                bad.append(f"{n}: not defined in {', '.join(files)}")
    for b in bad:
        print("arch_map:", b)
    print(f"arch_map: {checked} names checked, {len(bad)} wrong")
    print(f"{checked - len(bad)} passed, {len(bad)} failed")
    return 1 if bad or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
