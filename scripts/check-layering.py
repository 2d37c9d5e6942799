#!/usr/bin/env python3
"""Checks that guardjit's #include graph follows its layers.

Every `#include "guardjit/..."` (and every quoted include that resolves to a
file of another library) in include/, lib/, tools/ and python/src/ is an
arrow between two libraries. The arrows must run down the layers:

    IR <- Import, Transforms <- Runtime <- TorchRuntime, JIT <- Check
       <- Embed, Portable, Tools <- tools/, python/src

(a library may use its own layer and any lower one), the library graph must
have no cycle, the Runtime library and the embedding headers
(include/guardjit/guardjit.h, include/guardjit/portable.h) must reach no
LLVM header, directly or through a guardjit header they include, and the
libraries' DEPENDS in lib/*/CMakeLists.txt must run down the same layers
(Runtime not declared an LLVM library).

    scripts/check-layering.py [--root DIR] [--graph]
    scripts/check-layering.py --self-test

Exit status 0 when the tree is clean, 1 with one `error:` line per offending
include otherwise. --graph prints the library graph (each arrow with one
include that makes it). --self-test runs the checker on small synthetic
trees, one per rule, and fails unless each rule fires (and a clean tree
passes). Run by ctest as `layering` and `layering-selftest`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

# The layers, lowest first. Check is the provider-neutral check library
# (DESIGN.md decision 15): above Runtime and JIT, below the front doors.
LAYERS: list[list[str]] = [
    ["IR"],
    ["Import", "Transforms"],
    ["Runtime"],
    ["TorchRuntime", "JIT"],
    ["Check"],
    ["Embed", "Portable", "Tools"],
    ["tools", "python/src"],
]
LEVEL = {lib: i for i, libs in enumerate(LAYERS) for lib in libs}
# Vendored third-party headers any layer may use (they include no guardjit).
VENDORED = {"dlpack"}
# Libraries and public headers that must not reach LLVM.
NO_LLVM_LIBS = {"Runtime"}
NO_LLVM_HEADERS = {"include/guardjit/guardjit.h", "include/guardjit/portable.h"}
# Facade headers at the top of include/guardjit and the library they belong to.
TOP_HEADERS = {"guardjit.h": "Embed", "portable.h": "Portable"}

SCANNED = ("include", "lib", "tools", "python/src")
SOURCE_SUFFIXES = {".h", ".hpp", ".def", ".inc", ".cpp", ".cc", ".c"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
LLVM_RE = re.compile(r"^(llvm|llvm-c|mlir|clang|lld)/")


def library_of(rel: str) -> str | None:
    """The library a repository-relative path belongs to, or None."""
    parts = rel.split("/")
    if parts[0] == "include" and len(parts) >= 3 and parts[1] == "guardjit":
        if len(parts) == 3:
            return TOP_HEADERS.get(parts[2])
        return parts[2]
    if parts[0] == "lib" and len(parts) >= 3:
        return parts[1]
    if parts[0] == "tools" and len(parts) >= 2:
        return "tools"
    if parts[:2] == ["python", "src"]:
        return "python/src"
    return None


def target_of(spelled: str) -> tuple[str | None, str]:
    """Library and repository-relative path of `#include "guardjit/..."`."""
    rest = spelled[len("guardjit/"):]
    path = "include/guardjit/" + rest
    if "/" not in rest:
        return TOP_HEADERS.get(rest), path
    return rest.split("/", 1)[0], path


class Include:
    def __init__(self, src: str, line: int, spelled: str, lib: str | None,
                 path: str | None):
        self.src, self.line, self.spelled = src, line, spelled
        self.lib, self.path = lib, path

    def where(self) -> str:
        return f'{self.src}:{self.line}: #include "{self.spelled}"'


def scan(root: Path) -> tuple[dict[str, list[Include]], dict[str, list[tuple[int, str]]]]:
    """Per file: its includes of guardjit files, and its LLVM includes."""
    ours: dict[str, list[Include]] = {}
    llvm: dict[str, list[tuple[int, str]]] = {}
    for top in SCANNED:
        base = root / top
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                p = Path(dirpath) / name
                if p.suffix not in SOURCE_SUFFIXES:
                    continue
                rel = p.relative_to(root).as_posix()
                incs: list[Include] = []
                lls: list[tuple[int, str]] = []
                text = p.read_text(encoding="utf-8", errors="replace")
                for n, line in enumerate(text.splitlines(), 1):
                    m = INCLUDE_RE.match(line)
                    if not m:
                        continue
                    quote, spelled = m.groups()
                    if LLVM_RE.match(spelled):
                        lls.append((n, spelled))
                    elif spelled.startswith("guardjit/"):
                        lib, path = target_of(spelled)
                        incs.append(Include(rel, n, spelled, lib, path))
                    elif quote == '"':
                        # A private header next to the file, or a path that
                        # walks into another library's folder.
                        q = (p.parent / spelled).resolve()
                        try:
                            qrel = q.relative_to(root.resolve()).as_posix()
                        except ValueError:
                            continue
                        if q.is_file():
                            incs.append(Include(rel, n, spelled,
                                                library_of(qrel), qrel))
                ours[rel] = incs
                llvm[rel] = lls
    return ours, llvm


def check(root: Path, show_graph: bool = False) -> list[str]:
    ours, llvm = scan(root)
    errors: list[str] = []
    # 1. Layers: every arrow runs to the same layer or a lower one.
    edges: dict[tuple[str, str], Include] = {}
    for src, incs in ours.items():
        lib = library_of(src)
        for inc in incs:
            if lib is None or inc.lib is None or inc.lib == lib:
                continue
            if inc.lib in VENDORED:
                continue
            edges.setdefault((lib, inc.lib), inc)
            if lib not in LEVEL or inc.lib not in LEVEL:
                unknown = lib if lib not in LEVEL else inc.lib
                errors.append(
                    f"{inc.where()}: library '{unknown}' has no layer "
                    f"(add it to LAYERS in scripts/check-layering.py)")
                continue
            if LEVEL[inc.lib] > LEVEL[lib]:
                errors.append(
                    f"{inc.where()}: {lib} (layer {LEVEL[lib]}) must not "
                    f"include {inc.lib} (layer {LEVEL[inc.lib]}): arrows run "
                    f"down the layers only")
    # 2. No cycle between libraries (same-layer arrows could form one).
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    for cycle in find_cycles(graph):
        hops = ", ".join(edges[(cycle[i], cycle[i + 1])].where()
                         for i in range(len(cycle) - 1))
        errors.append(f"include cycle {' -> '.join(cycle)} ({hops})")
    # 3. No LLVM in Runtime or in the embedding headers, transitively
    #    through the guardjit headers they include.
    def reaches_llvm(start: str) -> tuple[list[str], int, str] | None:
        """The include chain from `start` to an LLVM header, if any."""
        seen = {start}
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        while stack:
            f, chain = stack.pop()
            if llvm.get(f):
                line, spelled = llvm[f][0]
                return chain, line, spelled
            for inc in ours.get(f, []):
                if inc.path and inc.path not in seen and inc.path in ours:
                    seen.add(inc.path)
                    stack.append((inc.path, chain + [inc.path]))
        return None

    for src in sorted(ours):
        if library_of(src) in NO_LLVM_LIBS or src in NO_LLVM_HEADERS:
            hit = reaches_llvm(src)
            if hit:
                chain, line, spelled = hit
                via = " -> ".join(chain)
                what = (f"{library_of(src)} library" if src not in NO_LLVM_HEADERS
                        else "the embedding header")
                errors.append(
                    f'{chain[-1]}:{line}: #include "{spelled}": {what} must '
                    f"not reach LLVM (via {via})")
    # 4. The link graph (lib/*/CMakeLists.txt) follows the same layers, and
    #    the no-LLVM libraries are not declared LLVM libraries.
    errors += check_cmake(root)
    if show_graph:
        for (a, b), inc in sorted(edges.items(),
                                  key=lambda e: (LEVEL.get(e[0][0], 99), e[0])):
            print(f"{a} -> {b}    ({inc.where()})")
    return errors


CMAKE_LIB_RE = re.compile(r"guardjit_add_library\(\s*Guardjit(\w+)([^)]*)\)", re.S)


def check_cmake(root: Path) -> list[str]:
    """Each guardjit_add_library's DEPENDS runs down the layers."""
    errors: list[str] = []
    for cml in sorted((root / "lib").glob("*/CMakeLists.txt")):
        rel = cml.relative_to(root).as_posix()
        text = cml.read_text(encoding="utf-8", errors="replace")
        for m in CMAKE_LIB_RE.finditer(text):
            lib, body = m.group(1), m.group(2)
            line = text.count("\n", 0, m.start()) + 1
            words = re.sub(r"#[^\n]*", "", body).split()
            if lib in NO_LLVM_LIBS and "LLVM" in words:
                errors.append(f"{rel}:{line}: Guardjit{lib} is declared an "
                              f"LLVM library; {lib} must not use LLVM")
            deps = words[words.index("DEPENDS") + 1:] if "DEPENDS" in words else []
            for dep in deps:
                if not dep.startswith("Guardjit"):
                    continue
                dep = dep[len("Guardjit"):]
                if lib in LEVEL and dep in LEVEL and LEVEL[dep] > LEVEL[lib]:
                    errors.append(
                        f"{rel}:{line}: Guardjit{lib} DEPENDS Guardjit{dep}: "
                        f"{lib} (layer {LEVEL[lib]}) must not link {dep} "
                        f"(layer {LEVEL[dep]})")
    return errors


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a closed path) per strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(graph):
        if v not in index:
            strong(v)
    cycles = []
    for comp in comps:
        members = set(comp)
        start = min(comp)
        # Breadth-first back to `start` inside the component.
        prev = {start: None}
        queue = [start]
        found = None
        while queue and not found:
            v = queue.pop(0)
            for w in sorted(graph.get(v, ())):
                if w == start:
                    found = v
                    break
                if w in members and w not in prev:
                    prev[w] = v
                    queue.append(w)
        path = [start]
        v = found
        while v is not None and v != start:
            path.insert(1, v)
            v = prev[v]
        cycles.append(path + [start])
    return cycles


def self_test() -> int:
    """Each rule must fire on a tree made to break it; a clean tree passes."""
    clean = {
        "include/guardjit/IR/GuardSet.h": "#include <vector>\n",
        "include/guardjit/Runtime/Helpers.h":
            '#include "guardjit/IR/GuardSet.h"\n',
        "lib/Runtime/Helpers.cpp":
            '#include "guardjit/Runtime/Helpers.h"\n#include "Private.h"\n',
        "lib/Runtime/Private.h": "#include <cstdint>\n",
        "include/guardjit/JIT/Engine.h":
            '#include "guardjit/Runtime/Helpers.h"\n#include "llvm/IR/Module.h"\n',
        "include/guardjit/guardjit.h": "#include <cstddef>\n",
        "lib/Embed/Embed.cpp":
            '#include "guardjit/guardjit.h"\n#include "guardjit/JIT/Engine.h"\n',
    }
    cases = {
        "clean": ({}, None),
        "upward": ({"lib/Runtime/Bad.cpp": '#include "guardjit/JIT/Engine.h"\n'},
                   'lib/Runtime/Bad.cpp:1: #include "guardjit/JIT/Engine.h": '
                   "Runtime (layer 2) must not include JIT (layer 3)"),
        "upward-relative": ({"lib/IR/Bad.cpp": '#include "../Runtime/Private.h"\n'},
                            "IR (layer 0) must not include Runtime (layer 2)"),
        "cycle": ({"include/guardjit/Import/A.h": '#include "guardjit/Transforms/B.h"\n',
                   "include/guardjit/Transforms/B.h": '#include "guardjit/Import/A.h"\n'},
                  "include cycle Import -> Transforms -> Import"),
        "llvm-direct": ({"lib/Runtime/Bad.cpp": "#include <llvm/ADT/StringRef.h>\n"},
                        'lib/Runtime/Bad.cpp:1: #include "llvm/ADT/StringRef.h": '
                        "Runtime library must not reach LLVM"),
        "llvm-through-ir": ({"include/guardjit/IR/GuardSet.h": '#include "llvm/ADT/ArrayRef.h"\n'},
                            "Runtime library must not reach LLVM (via "
                            "include/guardjit/Runtime/Helpers.h -> "
                            "include/guardjit/IR/GuardSet.h)"),
        "llvm-embedding-header": ({"include/guardjit/guardjit.h": '#include "llvm/Support/Error.h"\n'},
                                  "the embedding header must not reach LLVM"),
        "cmake-upward": ({"lib/Runtime/CMakeLists.txt":
                          "guardjit_add_library(GuardjitRuntime\n  SOURCES A.cpp\n"
                          "  DEPENDS GuardjitJIT GuardjitIR)\n"},
                         "lib/Runtime/CMakeLists.txt:1: GuardjitRuntime DEPENDS "
                         "GuardjitJIT: Runtime (layer 2) must not link JIT"),
        "cmake-llvm-runtime": ({"lib/Runtime/CMakeLists.txt":
                                "guardjit_add_library(GuardjitRuntime LLVM\n"
                                "  SOURCES A.cpp DEPENDS GuardjitIR)\n"},
                               "GuardjitRuntime is declared an LLVM library"),
        "unknown-library": ({"lib/Nowhere/X.cpp": '#include "guardjit/IR/GuardSet.h"\n'},
                            "library 'Nowhere' has no layer"),
    }
    failed = 0
    for name, (extra, expect) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            for rel, text in {**clean, **extra}.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(text)
            errors = check(root)
        if expect is None:
            ok = not errors
        else:
            ok = any(expect in e for e in errors)
        print(f"{'ok' if ok else 'FAIL'}: {name}")
        if not ok:
            failed += 1
            print(f"  expected: {expect or 'no error'}")
            for e in errors:
                print(f"  got: {e}")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path,
                    default=Path(__file__).resolve().parent.parent,
                    help="repository root (default: this script's parent)")
    ap.add_argument("--graph", action="store_true",
                    help="print the library graph")
    ap.add_argument("--self-test", action="store_true",
                    help="check the checker on synthetic trees")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    errors = check(args.root, args.graph)
    for e in errors:
        print(f"check-layering: error: {e}", file=sys.stderr)
    if errors:
        print(f"check-layering: {len(errors)} error(s); the layers are "
              f"{' <- '.join(', '.join(l) for l in LAYERS)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
