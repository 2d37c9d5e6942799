"""Reads a LeakSanitizer report and fails on leaks in guardjit's own code.

A leak is guardjit's when any frame of its allocation stack is in guardjit:
a function in namespace ``guardjit::``, a source file of this tree, or the
``guardjit/_core`` extension module. Leaks that are only CPython's or
torch's are listed by the module that allocated them; the suppressions that
matched (tests/sanitizers/lsan.supp) are printed by LeakSanitizer itself.

Usage: python leak_report.py LOG [--rc EXIT_CODE_OF_THE_RUN]
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
LEAK_HEAD = re.compile(r"^(Direct|Indirect) leak of (\d+) byte\(s\) in (\d+) object\(s\)")
FRAME = re.compile(r"^\s+#(\d+) 0x[0-9a-f]+ (?:in (?P<fn>.+?) )?(?P<where>\S+)$")
ALLOCATORS = ("malloc", "calloc", "realloc", "operator new", "posix_memalign", "aligned_alloc",
              "strdup", "PyMem_", "PyObject_Malloc", "_PyObject_", "PyObject_Realloc")
OURS = (f"{ROOT}/lib/", f"{ROOT}/python/src/", f"{ROOT}/include/guardjit/", "guardjit/_core")


def parse(text: str) -> list[dict]:
    leaks, cur = [], None
    for line in text.splitlines():
        m = LEAK_HEAD.match(line)
        if m:
            cur = {"kind": m[1], "bytes": int(m[2]), "objects": int(m[3]), "frames": []}
            leaks.append(cur)
            continue
        f = FRAME.match(line)
        if cur is not None and f:
            cur["frames"].append((f["fn"] or "", f["where"]))
        elif cur is not None and not line.strip():
            cur = None
    return leaks


def is_ours(leak: dict) -> bool:
    return any(fn.startswith("guardjit::") or " guardjit::" in fn or any(o in where for o in OURS)
               for fn, where in leak["frames"])


def allocator_site(leak: dict) -> str:
    for fn, where in leak["frames"]:
        if not fn.startswith(ALLOCATORS) and "libasan" not in where:
            module = re.sub(r"\+0x[0-9a-f]+\)?$", "", where.strip("()"))
            return f"{fn or '?'} ({pathlib.Path(module.split(':')[0]).name})"
    return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=pathlib.Path)
    ap.add_argument("--rc", type=int, default=0, help="exit code of the run (23: leaks found)")
    args = ap.parse_args()
    text = args.log.read_text(errors="replace")
    if args.rc not in (0, 23) or "leak_cycles:" not in text:
        print(text[-4000:])
        print(f"leak_report: the run failed (exit code {args.rc}); log: {args.log}", file=sys.stderr)
        return 1
    leaks = parse(text)
    ours = [l for l in leaks if is_ours(l)]
    others = collections.Counter()
    for l in leaks:
        if not is_ours(l):
            others[allocator_site(l)] += l["bytes"]
    print(f"leak_report: {len(leaks)} unsuppressed leak(s), {len(ours)} with a guardjit frame")
    for site, nbytes in others.most_common(15):
        print(f"  not guardjit's: {nbytes:>9} bytes  {site}")
    m = re.search(r"Suppressions used:\n(.*?)\n-{10,}", text, re.S)
    if m:
        print("  suppressed (tests/sanitizers/lsan.supp):\n" + m[1])
    for l in ours:
        print(f"\n{l['kind']} leak of {l['bytes']} bytes in {l['objects']} object(s):")
        for fn, where in l["frames"][:25]:
            print(f"    {fn} {where}")
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main())
