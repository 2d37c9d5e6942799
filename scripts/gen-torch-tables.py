#!/usr/bin/env python3
"""Writes the torch tables of one torch release, read from that release's own
install: lib/Import/TorchTables/torch-<release>.def.

The tables hold what guardjit hard-codes per release and can read from torch
itself:

* GJ_DISPATCH_KEY(Name, RawBits): the DispatchKeySet raw bits of each key that
  prints as itself, which TENSOR_MATCH stores and the TORCH_LOGS importer
  reads back from a printed `DispatchKeySet(CPU, ...)`;
* GJ_DTYPE(Name, ScalarType): each dtype's c10::ScalarType number, by the
  name str(dtype) prints (`torch.float32` -> float32);
* GJ_GLOBAL_STATE_FIELD("path", type, length): the fields of the JSON that
  GlobalStateGuard stores (what GLOBAL_STATE compares; lib/Portable reads the
  same JSON), with the length of list fields (the autocast device types).

Run it once with each release's interpreter (docs/porting.md):

    python  scripts/gen-torch-tables.py          # writes the running torch's table
    .../venv-torch-2.14.1/bin/python scripts/gen-torch-tables.py
    python scripts/gen-torch-tables.py --check   # exit 1 if the committed table differs

The build picks the table of the torch it is built against
(lib/Import/CMakeLists.txt) and stops at configure time when there is none.
A table depends only on the release (2.14.1), not on the local build
(+cpu, +cu130): both print the same keys and dtypes.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import warnings

TABLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "lib",
                          "Import", "TorchTables")


def release(version: str) -> str:
    """'2.14.1+cu130' -> '2.14.1' (the local part names the build, not the API)."""
    return version.split("+", 1)[0]


def version_key(rel: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.]", rel))


def dispatch_keys(torch) -> list[tuple[str, int]]:
    C = torch._C
    out = []
    for name in sorted(n for n in dir(C.DispatchKey) if n[:1].isupper()):
        ks = C.DispatchKeySet(getattr(C.DispatchKey, name))
        # Only keys that print as themselves can appear in a printed key set.
        if repr(ks) == f"DispatchKeySet({name})":
            out.append((name, ks.raw_repr()))
    return out


def header_scalar_types(torch) -> list[str] | None:
    """The c10 names of AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS, in
    ScalarType order, from the release's headers (None if not found)."""
    inc = os.path.join(os.path.dirname(torch.__file__), "include")
    for rel in ("torch/headeronly/core/ScalarType.h", "c10/core/ScalarType.h"):
        try:
            with open(os.path.join(inc, rel), encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        m = re.search(r"#define AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS\(_\)((?:.*\\\n)*.*\n)",
                      text)
        if m:
            return re.findall(r"_\([^,]+,\s*(\w+)\)", m.group(1))
    return None


def dtypes(torch) -> list[tuple[str, int]]:
    """(str(dtype) without 'torch.', c10::ScalarType) for every dtype of the
    release, in ScalarType order. TorchScript's prim::dtype returns the
    ScalarType of a tensor as an int."""
    found: dict[int, str] = {}
    all_dtypes = {getattr(torch, n) for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental or deprecated dtypes
        for dt in all_dtypes:
            st = int(torch.ops.prim.dtype(torch.empty(0, dtype=dt)))
            name = str(dt).removeprefix("torch.")
            assert found.setdefault(st, name) == name, (st, name, found[st])
    # The default dtype GlobalStateGuard stores is the same number.
    state = json.loads(torch._C._dynamo.guards.GlobalStateGuard().__getstate__())
    assert found.get(state["default_dtype"]) == str(torch.get_default_dtype()).removeprefix("torch.")
    # Every ScalarType of the headers has a dtype, and no more.
    names = header_scalar_types(torch)
    if names is not None:
        assert sorted(found) == list(range(len(names))), (sorted(found), names)
    return sorted(((n, st) for st, n in found.items()), key=lambda p: p[1])


def global_state_fields(torch) -> list[tuple[str, str, int]]:
    state = json.loads(torch._C._dynamo.guards.GlobalStateGuard().__getstate__())
    out = []

    def walk(prefix: str, v) -> None:
        if isinstance(v, dict):
            for k in sorted(v):
                walk(f"{prefix}{k}.", v[k])
            return
        path = prefix[:-1]
        if isinstance(v, list):
            kinds = {type(x).__name__ for x in v}
            out.append((path, f"{kinds.pop() if len(kinds) == 1 else 'mixed'}_list", len(v)))
        else:
            out.append((path, type(v).__name__, 0))

    walk("", state)
    return out


def body(torch) -> str:
    lines = ["#ifdef GJ_DISPATCH_KEY"]
    lines += [f"GJ_DISPATCH_KEY({n}, {bits}ULL)" for n, bits in dispatch_keys(torch)]
    lines += ["#undef GJ_DISPATCH_KEY", "#endif", "#ifdef GJ_DTYPE"]
    lines += [f"GJ_DTYPE({n}, {st})" for n, st in dtypes(torch)]
    lines += ["#undef GJ_DTYPE", "#endif", "#ifdef GJ_GLOBAL_STATE_FIELD"]
    lines += [f'GJ_GLOBAL_STATE_FIELD("{p}", {t}, {n})' for p, t, n in global_state_fields(torch)]
    lines += ["#undef GJ_GLOBAL_STATE_FIELD", "#endif"]
    return "\n".join(lines) + "\n"


def table_body(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return "".join(line for line in f if not line.startswith("//"))


def previous_table(tables_dir: str, rel: str) -> str | None:
    """The committed table of the newest release older than `rel`."""
    older = []
    for f in os.listdir(tables_dir) if os.path.isdir(tables_dir) else ():
        m = re.fullmatch(r"torch-(.+)\.def", f)
        if m and version_key(m.group(1)) < version_key(rel):
            older.append(m.group(1))
    return max(older, key=version_key) if older else None


def generate(torch, tables_dir: str) -> str:
    rel = release(torch.__version__)
    text = body(torch)
    head = [f"// Generated by scripts/gen-torch-tables.py from torch {rel}; do not edit.",
            "// GJ_DISPATCH_KEY(Name, RawBits): DispatchKeySet(DispatchKey.Name).raw_repr()",
            "// GJ_DTYPE(Name, ScalarType): torch.Name as c10::ScalarType",
            "// GJ_GLOBAL_STATE_FIELD(\"path\", type, length): a field of GlobalStateGuard's JSON"]
    prev = previous_table(tables_dir, rel)
    if prev is None:
        head.append("// The first release with a table.")
    elif table_body(os.path.join(tables_dir, f"torch-{prev}.def")) == text:
        head.append(f"// Identical to the table of torch {prev} (torch-{prev}.def).")
    else:
        head.append(f"// Differs from the table of torch {prev}: diff torch-{prev}.def.")
    return "\n".join(head) + "\n" + text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", help="file to write ('-' for stdout); default: "
                    "lib/Import/TorchTables/torch-<release>.def")
    ap.add_argument("--tables-dir", default=TABLES_DIR, help="where the committed tables are")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the committed table of the running "
                         "release is missing or differs")
    args = ap.parse_args()

    import torch

    text = generate(torch, args.tables_dir)
    path = os.path.join(args.tables_dir, f"torch-{release(torch.__version__)}.def")
    if args.check:
        try:
            with open(path, encoding="utf-8") as f:
                same = f.read() == text
        except OSError:
            same = False
        if not same:
            print(f"{os.path.normpath(path)} is missing or stale for torch {torch.__version__}; "
                  "run scripts/gen-torch-tables.py with this interpreter (docs/porting.md)",
                  file=sys.stderr)
            return 1
        return 0
    out = args.output or path
    if out == "-":
        sys.stdout.write(text)
    else:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {os.path.normpath(out)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
