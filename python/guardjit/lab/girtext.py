"""Canonical, id-free views of a guard set's ``.gir`` text, for comparing two
recordings of the same compile unit (docs/gir-format.md).

Two recordings of one unit (e.g. Dynamo's filtered tree and guardjit's filter
pass over the unfiltered one) number their values, objects, tensor specs and
origins differently. Here every reference is replaced by what it refers to:
``%N`` by the value's source, ``#K`` by the object's kind and description,
``tensor=N`` by the spec and ``origin=N`` by the origin's fields, so two sets
are the same guards iff their canonical multisets are equal. Addresses in
object descriptions (``<function f at 0x7f..>``) are masked: Dynamo creates
some callables anew on every build.
"""

from __future__ import annotations

import collections
import dataclasses
import re

_ADDR = re.compile(r"0x[0-9a-fA-F]{6,}")
_STR = r'"(?:[^"\\]|\\.)*"'
_OBJECT = re.compile(r"^object #(\d+) = (.*)$")
_TENSOR = re.compile(r"^tensor (\d+) = (.*)$")
_ORIGIN = re.compile(r"^origin (\d+) = (.*)$")
_VALUE = re.compile(r"^%(\d+) = (\w+)(.*)$")
_GUARD = re.compile(r"^guard (\w+)(.*)$")
_SOURCE = re.compile(r'source=(' + _STR + r')')
_REF_OBJ = re.compile(r"#(\d+)")
_REF_VAL = re.compile(r"%(\d+)")
_REF_TENSOR = re.compile(r"\btensor=(\d+)")
_REF_ORIGIN = re.compile(r"\borigin=(\d+)")
_LOC = re.compile(r'\s*loc=' + _STR + r':\d+')


@dataclasses.dataclass
class Canonical:
    """One guard set, every id replaced by its referent."""

    guards: collections.Counter  # canonical guard line -> count
    values: collections.Counter  # canonical value line -> count
    # (guard kind, origin "GUARD_TYPE" name) -> count, "-" for no origin
    origins: collections.Counter


def _strip_strings(line: str) -> str:
    """`line` with string literals blanked, so ids inside strings are ignored."""
    return re.sub(_STR, '""', line)


def _sub_outside_strings(pattern: re.Pattern, repl, line: str) -> str:
    parts = re.split("(" + _STR + ")", line)
    return "".join(p if i % 2 else pattern.sub(repl, p) for i, p in enumerate(parts))


def canonical(text: str, keep_locations: bool = True) -> Canonical:
    """The canonical form of the (single) guard set in ``text``."""
    objects: dict[str, str] = {}
    tensors: dict[str, str] = {}
    origins: dict[str, str] = {}
    sources: dict[str, str] = {"0": "L"}
    guards: collections.Counter = collections.Counter()
    values: collections.Counter = collections.Counter()
    by_origin: collections.Counter = collections.Counter()

    def obj(m: re.Match) -> str:
        return "<" + objects[m.group(1)] + ">"

    def val(m: re.Match) -> str:
        return "%[" + sources[m.group(1)] + "]"

    for raw in text.splitlines():
        line = raw.split("//", 1)[0].strip() if raw.lstrip().startswith("//") else raw.strip()
        if not line or line.startswith(("guard_set", "gir ")) or line == "}":
            continue
        if m := _OBJECT.match(line):
            objects[m.group(1)] = _ADDR.sub("0x?", m.group(2))
        elif m := _TENSOR.match(line):
            tensors[m.group(1)] = _sub_outside_strings(_REF_OBJ, obj, m.group(2))
        elif m := _ORIGIN.match(line):
            origins[m.group(1)] = m.group(2)
        elif m := _VALUE.match(line):
            vid, kind, rest = m.groups()
            src = _SOURCE.search(rest)
            sources[vid] = src.group(1)[1:-1] if src else f"?{vid}"
            if kind == "root":
                continue
            # A value's origin is the first Dynamo guard that made it: which
            # one depends on the guards built before, so it is not compared.
            rest = _sub_outside_strings(_REF_ORIGIN, "", rest)
            rest = _sub_outside_strings(_REF_OBJ, obj, rest)
            values[kind + " " + " ".join(_sub_outside_strings(_REF_VAL, val, rest).split())] += 1
        elif m := _GUARD.match(line):
            kind, rest = m.groups()
            origin = _REF_ORIGIN.search(_strip_strings(rest))
            by_origin[(kind, origins[origin.group(1)].split(" ", 2)[0] + " "
                       + origins[origin.group(1)].split(" ", 2)[1]
                       if origin else "-")] += 1
            rest = _sub_outside_strings(
                _REF_TENSOR, lambda t: "tensor={" + tensors[t.group(1)] + "}", rest)
            rest = _sub_outside_strings(
                _REF_ORIGIN, lambda o: "origin={" + origins[o.group(1)] + "}", rest)
            rest = _sub_outside_strings(_REF_OBJ, obj, rest)
            rest = _sub_outside_strings(_REF_VAL, val, rest)
            if not keep_locations:
                rest = _LOC.sub("", rest)
            guards[kind + " " + _ADDR.sub("0x?", rest.strip())] += 1
        else:
            raise ValueError(f"unexpected .gir line: {raw!r}")
    return Canonical(guards, values, by_origin)


_ORIGIN_ATTR = re.compile(r" origin=\{(" + r'"[^"]*" name=' + _STR + r")[^}]*\}")
# Dynamo names the builtins dict it installs as a global with a counter that
# grows with every build (`__builtins_dict___2`); every such name holds the
# same dict, so the counter is not part of a guard's identity.
_BUILTINS = re.compile(r"__builtins_dict___\d+")
# Globals Dynamo installs by object (OutputGraph.install_global_by_id) are
# named `{prefix}_{id(value)}_c{compile_id}`: the same object gets another
# name in another torch.compile.
# install_global_by_id names: `_<id>_c<compile id>`, with the id as a number
# or, in reprs stable_text has normalized, as `<id>`.
_BY_ID = re.compile(r"(_(?:\d+|<id>))_c\d+\b")


def guard_view(text: str) -> tuple[dict[str, str], collections.Counter]:
    """({guard without its origin: (GUARD_TYPE, name) of the first guard
    with that text}, values) of ``text``.

    Names of the globals Dynamo installs are taken without their per-build
    or per-compile counters. Copies of one check that differ only in their origin (the recorder keeps
    one per Dynamo guard that asked for it, see recorder._add) count once;
    the first in IR order is the one Dynamo's tree keeps.
    """
    c = canonical(_BY_ID.sub(r"\1_c?", _BUILTINS.sub("__builtins_dict___N", text)))
    first: dict[str, str] = {}
    for line in c.guards:  # insertion order = IR order
        m = _ORIGIN_ATTR.search(line)
        key = _ORIGIN_ATTR.sub("", line)
        first.setdefault(key, m.group(1) if m else "-")
    return first, c.values


def difference(a: collections.Counter, b: collections.Counter) -> tuple[list, list]:
    """(entries only in a, entries only in b), with multiplicity, sorted."""
    return sorted((a - b).elements()), sorted((b - a).elements())
