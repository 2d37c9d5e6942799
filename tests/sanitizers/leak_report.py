"""Reads a LeakSanitizer report of tests/sanitizers/leak_cycles.py and fails
on any leak that is guardjit's or that nothing explains.

LeakSanitizer runs without suppressions, so every leak is in the log; this
script applies ``lsan.supp`` itself, with LeakSanitizer's matching (a
``leak:PATTERN`` line matches a stack when any frame's function, file or
module contains PATTERN), but never to a stack with a frame in guardjit: a
function in namespace ``guardjit::``, a source file of this tree, or the
``guardjit/_core`` extension module. So a suppression for CPython or torch
can never hide a leak guardjit's code took part in.

Usage: python leak_report.py LOG [--rc EXIT_CODE_OF_THE_RUN] [--supp FILE]
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LEAK_HEAD = re.compile(r"^(Direct|Indirect) leak of (\d+) byte\(s\) in (\d+) object\(s\)")
FRAME = re.compile(r"^\s+#(\d+) 0x[0-9a-f]+ (?:in (?P<fn>.+?) )?(?P<where>\S+)$")
# A source file of this tree, as DWARF names it (absolute, or relative to
# the build directory), or the installed extension module.
OURS = re.compile(r"(?:^|/)(?:lib/(?:IR|Import|JIT|Runtime|Tools|TorchRuntime|Transforms)"
                  r"|python/src|include/guardjit)/[^/]+\.(?:cpp|h|def)\b|guardjit/_core")
SKIP = ("__interceptor_", "malloc", "calloc", "realloc", "operator new", "PyMem_",
        "PyObject_Malloc", "_PyObject_", "PyObject_Realloc", "gc_alloc", "PyUnicode_New",
        "PyFloat_From", "PyTuple_", "PyList_New", "PyDict_New")


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


def load_suppressions(path: pathlib.Path) -> list[str]:
    pats = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("leak:"):
            pats.append(line[len("leak:"):])
    return pats


def is_ours(leak: dict) -> bool:
    return any("guardjit::" in fn or OURS.search(where) for fn, where in leak["frames"])


def suppressed_by(leak: dict, pats: list[str]) -> str | None:
    for p in pats:
        glob = p if ("*" in p or "?" in p) else f"*{p}*"
        if any(fnmatch.fnmatchcase(fn, glob) or fnmatch.fnmatchcase(where, glob)
               for fn, where in leak["frames"]):
            return p
    return None


def site(leak: dict) -> str:
    for fn, where in leak["frames"]:
        if not fn.startswith(SKIP) and "libasan" not in where:
            module = re.sub(r"\+0x[0-9a-f]+\)?$", "", where.strip("()")).split(":")[0]
            return f"{fn or '?'} ({pathlib.Path(module).name})"
    return "?"


def print_stack(leak: dict) -> None:
    print(f"\n{leak['kind']} leak of {leak['bytes']} bytes in {leak['objects']} object(s):")
    for fn, where in leak["frames"][:25]:
        print(f"    {fn} {where}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=pathlib.Path)
    ap.add_argument("--rc", type=int, default=0, help="exit code of the run (23: leaks found)")
    ap.add_argument("--supp", type=pathlib.Path, default=HERE / "lsan.supp")
    args = ap.parse_args()
    text = args.log.read_text(errors="replace")
    if args.rc not in (0, 23) or "leak_cycles:" not in text:
        sys.stdout.write(text[-4000:] + "\n")
        print(f"leak_report: the run failed (exit code {args.rc}); log: {args.log}")
        return 1
    pats = load_suppressions(args.supp)
    leaks = parse(text)
    ours = [l for l in leaks if is_ours(l)]
    used: collections.Counter = collections.Counter()
    unexplained = []
    for l in leaks:
        if l in ours:
            continue
        p = suppressed_by(l, pats)
        if p is None:
            unexplained.append(l)
        else:
            used[p] += l["bytes"]
    total = sum(l["bytes"] for l in leaks)
    print(f"leak_report: {len(leaks)} leak(s), {total} bytes: {len(ours)} with a guardjit "
          f"frame, {len(unexplained)} unexplained, the rest CPython's or torch's:")
    for p, nbytes in used.most_common():
        print(f"  {nbytes:>9} bytes  leak:{p}")
    for l in ours:
        print_stack(l)
    if unexplained:
        print("\nunexplained (not guardjit's; add a suppression with its reason, or fix):")
        for l in unexplained:
            print(f"  {l['bytes']:>9} bytes  {site(l)}")
        for l in unexplained[:3]:
            print_stack(l)
    return 1 if ours or unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
