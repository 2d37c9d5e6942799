#!/usr/bin/env python3
"""Names what changed in torch's guard machinery between two torch installs.

    scripts/diff-torch-releases.py OLD_PYTHON NEW_PYTHON          # a report for people
    scripts/diff-torch-releases.py OLD_PYTHON NEW_PYTHON --json   # the same, for machines

Each interpreter runs this file with --extract and prints what its torch has
(as JSON); the two are then compared. Nothing is imported from guardjit's
package (its _core need not be built for either torch); guardjit's
python/guardjit/pyattr.py is loaded from this tree for its fingerprint
function and the fingerprints it has reviewed.

Groups, in report order:
  guard-builder      GuardBuilder's guard methods (UPPER_CASE) and its other
                     methods: added, removed, code changed, and changed only in
                     annotations/comments/docstrings (AST compared without them)
  guards-functions   module-level functions of torch/_dynamo/guards.py
  check-function-manager, guard-manager-wrapper  methods of those classes
  signatures         __init__ of CheckFunctionManager, GuardManagerWrapper, GuardBuilder
  guards-state       GuardsState's dataclass fields
  closure-vars       the names guard code is evaluated with (_get_closure_vars)
  sources            Source classes of torch/_dynamo/source.py and the ones
                     GuardBuilder.get_guard_manager_from_source handles
  pybind             torch._C._dynamo.guards: classes, methods and functions,
                     from dir() (with pybind's signatures) and from guards.pyi
  config             torch._dynamo.config defaults; "guard-related" are those
                     guards.py reads or whose name says guard
  tables             dispatch-key bits, ScalarType numbers, GlobalStateGuard
                     fields (scripts/gen-torch-tables.py)
  headers            torch/include/torch/csrc/dynamo: files added, removed,
                     changed in code or in comments/whitespace only
  fingerprints       the functions guardjit proves or fingerprints
                     (python/guardjit/pyattr.py, lambdas.py): bytecode
                     fingerprint per release, and whether it is the reviewed one
"""
from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
import types
import warnings
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, os.pardir))

# ---------------------------------------------------------------------------
# Extraction (runs under each interpreter)
# ---------------------------------------------------------------------------


def _sha(text: str | bytes) -> str:
    if isinstance(text, str):
        text = text.encode()
    return hashlib.sha256(text).hexdigest()[:16]


class _StripTypes(ast.NodeTransformer):
    """Drops what does not change behaviour: annotations and docstrings
    (comments and layout are not in the AST)."""

    def _docstring(self, node):
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]

    def visit_FunctionDef(self, node):
        self._docstring(node)
        node.returns = None
        node.type_comment = None
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._docstring(node)
        return self.generic_visit(node)

    def visit_arg(self, node):
        node.annotation = None
        node.type_comment = None
        return node

    def visit_AnnAssign(self, node):
        # A dataclass field is an annotation: keep that there is one.
        node.annotation = ast.Constant("<annotation>")
        return self.generic_visit(node)


def _stripped(node: ast.AST) -> ast.AST:
    return _StripTypes().visit(ast.parse(ast.unparse(node))).body[0]


def _entry(node: ast.AST) -> dict:
    """Hashes of a definition's text, of its code (no annotations, comments
    or docstrings) and of its code without decorators; its code as text."""
    code = _stripped(node)
    entry = {"text": _sha(ast.unparse(node)),
             "code": _sha(ast.dump(code, include_attributes=False)),
             "source": ast.unparse(code)}
    if getattr(code, "decorator_list", None):
        code.decorator_list = []
    entry["body"] = _sha(ast.dump(code, include_attributes=False))
    return entry


def _defs(tree_body) -> dict[str, ast.AST]:
    return {n.name: n for n in tree_body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _members(cls_node: ast.ClassDef) -> dict[str, dict]:
    """Methods and class-level assignments of a class, each with the hash of
    its text and of its code."""
    out = {}
    for n in cls_node.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = n.name
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            name = n.target.id
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            name = n.targets[0].id
        else:
            continue
        # A property's setter reuses the name: keep both.
        while name in out:
            name += "'"
        out[name] = _entry(n)
    return out


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _describe(v) -> str:
    """A process-independent description of a value bound for guard code."""
    if isinstance(v, types.ModuleType):
        return f"module {v.__name__}"
    if isinstance(v, type):
        return f"class {v.__module__}.{v.__qualname__}"
    if callable(v):
        mod = getattr(v, "__module__", None) or type(v).__module__
        name = getattr(v, "__qualname__", None) or getattr(v, "__name__", type(v).__name__)
        return f"{mod}.{name}"
    return repr(v)


def _config_repr(v, site: str) -> str:
    """repr() that does not depend on the process or the install: sets
    sorted, addresses and the site-packages directory left out."""
    try:
        if isinstance(v, (set, frozenset)):
            text = "{" + ", ".join(sorted(repr(x) for x in v)) + "}" if v else f"{type(v).__name__}()"
        else:
            text = repr(v)
    except Exception:
        return "<unprintable>"
    return re.sub(r" at 0x[0-9a-f]+", "", text).replace(site, "<site-packages>")


def _code_fingerprint(code: types.CodeType) -> str:
    consts = tuple(_code_fingerprint(c) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return _sha(repr((code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars,
                      code.co_cellvars, code.co_argcount, code.co_posonlyargcount,
                      code.co_kwonlyargcount, code.co_flags, code.co_exceptiontable)))


def _load_pyattr():
    """guardjit's pyattr.py without guardjit._core (a stub stands in)."""
    path = os.path.join(ROOT, "python", "guardjit", "pyattr.py")
    saved = {k: sys.modules.get(k) for k in ("guardjit", "guardjit._core")}
    pkg = types.ModuleType("guardjit")
    pkg.__path__ = []
    pkg._core = types.ModuleType("guardjit._core")
    sys.modules["guardjit"], sys.modules["guardjit._core"] = pkg, pkg._core
    try:
        spec = importlib.util.spec_from_file_location("_gj_pyattr", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    except Exception:
        return None
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def _fingerprints(torch, guards) -> dict[str, dict]:
    from torch._functorch._aot_autograd import utils as aot_utils

    pyattr = _load_pyattr()
    reviewed = {}
    if pyattr is not None and hasattr(pyattr, "fingerprint"):
        if isinstance(getattr(pyattr, "MODULE_GETATTR", None), str):
            reviewed["torch.nn.Module.__getattr__"] = pyattr.MODULE_GETATTR
        for n, h in getattr(pyattr, "MODULELIST_FUNCTIONS", {}).items():
            reviewed[f"torch.nn.ModuleList.{n}"] = h
    def nested_of(fn) -> dict:
        code = getattr(fn, "__code__", None)
        consts = code.co_consts if code is not None else ()
        return {c.co_name: c for c in consts if isinstance(c, types.CodeType)}

    nested = nested_of(guards.GuardBuilder.AUTOGRAD_SAVED_TENSORS_HOOKS)
    cow = nested_of(getattr(guards.GuardBuilder, "COW_TENSOR_MATCH", None))
    # unwrap: guardjit's recorder wraps this method when GUARDJIT=1 is set
    source_fn = inspect.unwrap(guards.GuardBuilder.get_guard_manager_from_source)
    source_lambdas = [c for c in source_fn.__code__.co_consts
                      if isinstance(c, types.CodeType) and c.co_name == "<lambda>"
                      and c.co_names == ("get",)]
    targets = [
        ("torch.nn.Module.__getattr__", "pyattr.py", torch.nn.Module.__dict__.get("__getattr__")),
        *((f"torch.nn.ModuleList.{n}", "pyattr.py", torch.nn.ModuleList.__dict__.get(n))
          for n in ("__getitem__", "_get_abs_string_index", "__len__")),
        ("GuardBuilder.AUTOGRAD_SAVED_TENSORS_HOOKS.<locals>.fn", "lambdas.py", nested.get("fn")),
        ("GuardBuilder.AUTOGRAD_SAVED_TENSORS_HOOKS.<locals>.hooks_ids_fn", "lambdas.py",
         nested.get("hooks_ids_fn")),
        ("torch._functorch._aot_autograd.utils.top_saved_tensors_hooks", "lambdas.py",
         getattr(aot_utils, "top_saved_tensors_hooks", None)),
        ("torch._functorch._aot_autograd.utils.saved_tensors_hooks_are_inlineable", "lambdas.py",
         getattr(aot_utils, "saved_tensors_hooks_are_inlineable", None)),
        # torch 2.14.1's templates lambdas.cow_tensor_match / contextvar_get prove.
        ("GuardBuilder.COW_TENSOR_MATCH.<locals>.guard_fn", "lambdas.py", cow.get("guard_fn")),
        ("torch._dynamo.guards._cow_tensor_matches", "lambdas.py",
         getattr(guards, "_cow_tensor_matches", None)),
        ("torch._dynamo.guards._try_is_cow_tensor", "lambdas.py",
         getattr(guards, "_try_is_cow_tensor", None)),
        # ContextVarGetSource: `lambda x, d=default_val: x.get(d)`, `lambda x: x.get()`
        *((f"GuardBuilder.get_guard_manager_from_source.<locals>.<lambda: x.get> #{i}",
           "lambdas.py", source_lambdas[i] if i < len(source_lambdas) else None)
          for i in range(2)),
    ]
    out = {}
    for name, user, obj in targets:
        code = obj if isinstance(obj, types.CodeType) else getattr(obj, "__code__", None)
        if code is None:
            out[name] = {"user": user, "missing": True}
            continue
        entry = {"user": user, "bytecode": _code_fingerprint(code), "names": list(code.co_names),
                 "consts": [repr(c) for c in code.co_consts if not isinstance(c, types.CodeType)],
                 "freevars": list(code.co_freevars)}
        if name in reviewed:
            fp = pyattr.fingerprint(obj)
            entry["pyattr_fingerprint"] = fp
            entry["reviewed"] = fp == reviewed[name]
        out[name] = entry
    return out


def _pyi(path: str) -> dict:
    """Classes (methods and attributes with their signatures), functions and
    other names of a .pyi stub."""
    tree = ast.parse(_read(path))

    def sig(fn) -> str:
        ret = f" -> {ast.unparse(fn.returns)}" if fn.returns else ""
        return f"({ast.unparse(fn.args)}){ret}"

    def members(body) -> dict[str, str]:
        out = {}
        for n in body:
            if isinstance(n, ast.FunctionDef):
                key = n.name
                while key in out:  # overloads
                    key += "'"
                out[key] = sig(n)
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                out[n.target.id] = ": " + ast.unparse(n.annotation)
            elif isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        out[t.id] = "= " + ast.unparse(n.value)
        return out

    classes = {n.name: members(n.body) for n in tree.body if isinstance(n, ast.ClassDef)}
    return {"classes": classes,
            "functions": members([n for n in tree.body if not isinstance(n, ast.ClassDef)])}


def _pybind_signature(obj) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip().split("\n")[0]
    return doc[doc.find("("):] if "(" in doc else "(no signature)"


def _runtime_api(mod) -> dict:
    classes, functions, others = {}, {}, {}
    for name in sorted(n for n in dir(mod) if not n.startswith("__")):
        obj = getattr(mod, name)
        if isinstance(obj, type):
            methods = {}
            names = {m for m in dir(obj) if not m.startswith("__")} | set(obj.__dict__)
            for m in sorted(names - {"__module__", "__doc__", "__dict__", "__weakref__",
                                     "_pybind11_conduit_v1_"}):
                attr = obj.__dict__.get(m, getattr(obj, m))
                methods[m] = "property" if isinstance(attr, property) else _pybind_signature(attr)
            classes[name] = {"bases": [b.__name__ for b in obj.__bases__], "methods": methods}
        elif callable(obj):
            functions[name] = _pybind_signature(obj)
        else:
            others[name] = type(obj).__name__
    return {"classes": classes, "functions": functions, "others": others}


def _strip_cpp_comments(text: str) -> str:
    token = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    text = token.sub(lambda m: " " if m.group(0)[0] == "/" else m.group(0), text)
    return re.sub(r"\s+", " ", text).strip()


def _headers(torch_dir: str) -> dict[str, dict]:
    base = os.path.join(torch_dir, "include", "torch", "csrc", "dynamo")
    out = {}
    for dirpath, _, files in os.walk(base):
        for f in sorted(files):
            path = os.path.join(dirpath, f)
            text = _read(path)
            out[os.path.relpath(path, base)] = {"text": _sha(text),
                                                "code": _sha(_strip_cpp_comments(text)),
                                                "path": path}
    return out


def _name_template(cls_node: ast.ClassDef) -> str | None:
    """What a Source's _name_template returns, as code ("{0}" is the base's name)."""
    for n in cls_node.body:
        if isinstance(n, ast.FunctionDef) and n.name == "_name_template":
            rets = [r.value for r in ast.walk(n) if isinstance(r, ast.Return) and r.value]
            return " | ".join(ast.unparse(r) for r in rets)
    return None


def _handled_sources(fn_node: ast.FunctionDef) -> list[str]:
    """Source classes named by istype/isinstance(source, ...) in a function."""
    names = set()
    for n in ast.walk(fn_node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) \
                and n.func.id in ("istype", "isinstance") and len(n.args) == 2 \
                and isinstance(n.args[0], ast.Name) and n.args[0].id == "source":
            arg = n.args[1]
            for e in (arg.elts if isinstance(arg, ast.Tuple) else [arg]):
                if isinstance(e, ast.Name):
                    names.add(e.id)
                elif isinstance(e, ast.Attribute):
                    names.add(e.attr)
    return sorted(names)


def extract() -> dict:
    warnings.simplefilter("ignore")
    import dataclasses
    import inspect

    import torch
    import torch._dynamo.config as config
    import torch._dynamo.guards as guards
    import torch._dynamo.source as source_mod
    from torch._C._dynamo import guards as C

    torch_dir = os.path.dirname(torch.__file__)
    facts: dict = {"torch": torch.__version__,
                   "python": sys.version.split()[0],
                   "executable": sys.executable,
                   "torch_dir": torch_dir}
    try:
        import numpy  # noqa: F401
        facts["numpy"] = True
    except ImportError:
        facts["numpy"] = False

    # torch/_dynamo/guards.py: classes' members and module functions, by AST.
    gtree = ast.parse(_read(guards.__file__))
    gdefs = _defs(gtree.body)
    for key, cls in (("guard-builder", "GuardBuilder"),
                     ("check-function-manager", "CheckFunctionManager"),
                     ("guard-manager-wrapper", "GuardManagerWrapper")):
        facts[key] = _members(gdefs[cls]) if cls in gdefs else {}
    facts["guards-functions"] = {n: _entry(d) for n, d in gdefs.items()
                                 if not isinstance(d, ast.ClassDef)}
    gmfs = next((n for n in gdefs["GuardBuilder"].body
                 if isinstance(n, ast.FunctionDef) and n.name == "get_guard_manager_from_source"),
                None)
    facts["handled-sources"] = _handled_sources(gmfs) if gmfs else []

    facts["signatures"] = {}
    for name, fn in (("CheckFunctionManager.__init__", guards.CheckFunctionManager.__init__),
                     ("GuardManagerWrapper.__init__", guards.GuardManagerWrapper.__init__),
                     ("GuardBuilder.__init__", guards.GuardBuilder.__init__)):
        sig = inspect.signature(fn)
        facts["signatures"][name] = {"params": [str(p) for p in sig.parameters.values()],
                                     "returns": str(sig.return_annotation)}
    facts["guards-state"] = {}
    if dataclasses.is_dataclass(getattr(guards, "GuardsState", None)):
        for f in dataclasses.fields(guards.GuardsState):
            default = f.default if f.default is not dataclasses.MISSING else "<required>"
            facts["guards-state"][f.name] = f"{f.type} = {default!r}" \
                if default != "<required>" else str(f.type)
    get_vars = getattr(guards, "_get_closure_vars", None)
    closure = get_vars() if get_vars else getattr(guards, "CLOSURE_VARS", {})
    facts["closure-vars"] = {k: _describe(v) for k, v in closure.items()}

    # Sources.
    stree = ast.parse(_read(source_mod.__file__))
    sdefs = {n.name: n for n in stree.body if isinstance(n, ast.ClassDef)}
    Source = torch._guards.Source
    facts["sources"] = {}
    for name, obj in vars(source_mod).items():
        if isinstance(obj, type) and issubclass(obj, Source) and obj.__module__ == source_mod.__name__:
            node = sdefs.get(name)
            facts["sources"][name] = {
                "bases": [b.__name__ for b in obj.__bases__],
                "members": _members(node) if node else {},
                "template": _name_template(node) if node else None}

    # torch._C._dynamo.guards.
    facts["pybind"] = _runtime_api(C)
    pyi = os.path.join(torch_dir, "_C", "_dynamo", "guards.pyi")
    facts["pyi"] = _pyi(pyi) if os.path.exists(pyi) else {"classes": {}, "functions": {}}

    # Config defaults; the names guards.py reads.
    entries = getattr(config, "_config", {})
    facts["config"] = {}
    for k in sorted(entries):
        e = entries[k]
        facts["config"][k] = {"default": _config_repr(e.default, os.path.dirname(torch_dir)),
                              "deprecated": bool(getattr(e, "deprecated", False))}
    facts["config-read-by-guards"] = sorted(set(re.findall(r"config\.(\w+)", _read(guards.__file__))))

    # Tables (the generator's own functions).
    spec = importlib.util.spec_from_file_location("_gj_gen_tables",
                                                  os.path.join(HERE, "gen-torch-tables.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    facts["tables"] = {
        "dispatch_keys": dict(gen.dispatch_keys(torch)),
        "dtypes": dict(gen.dtypes(torch)),
        "global_state_fields": {p: f"{t}[{n}]" if n else t
                                for p, t, n in gen.global_state_fields(torch)},
    }
    facts["headers"] = _headers(torch_dir)
    facts["fingerprints"] = _fingerprints(torch, guards)
    return facts


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------


def _keys(old: dict, new: dict) -> tuple[list, list, list]:
    return (sorted(set(new) - set(old)), sorted(set(old) - set(new)),
            sorted(set(old) & set(new)))


def _code_members(old: dict, new: dict, show_code: bool = False) -> dict:
    """added / removed / code changed / decorators only / annotations-or-
    comments-only, of {name: _entry} maps; with show_code, the diffs of the
    code that changed."""
    added, removed, common = _keys(old, new)
    changed = [k for k in common if old[k]["code"] != new[k]["code"]]
    out = {"added": added, "removed": removed,
           "code_changed": [k for k in changed if old[k]["body"] != new[k]["body"]],
           "decorators_only_changed": [k for k in changed if old[k]["body"] == new[k]["body"]],
           "text_only_changed": [k for k in common if old[k]["code"] == new[k]["code"]
                                 and old[k]["text"] != new[k]["text"]]}
    if show_code:
        out["diffs"] = {k: list(difflib.unified_diff(
            old[k]["source"].split("\n"), new[k]["source"].split("\n"), lineterm="", n=1))[2:]
            for k in changed}
    return {k: v for k, v in out.items() if v}


def _values(old: dict, new: dict) -> dict:
    added, removed, common = _keys(old, new)
    out = {"added": {k: new[k] for k in added}, "removed": {k: old[k] for k in removed},
           "changed": {k: [old[k], new[k]] for k in common if old[k] != new[k]}}
    return {k: v for k, v in out.items() if v}


def _is_guard_method(name: str) -> bool:
    return name.replace("_", "").isalnum() and name.upper() == name and name[0].isalpha()


def _header_diff(old_path: str, new_path: str, limit: int = 30) -> list[str]:
    def lines(p):
        return [ln for ln in _strip_cpp_comments(_read(p)).replace("; ", ";\n").replace(
            "{ ", "{\n").replace("} ", "}\n").split("\n")]
    d = list(difflib.unified_diff(lines(old_path), lines(new_path), lineterm="", n=0))[2:]
    d = [ln for ln in d if not ln.startswith("@@")]
    return d[:limit] + (["..."] if len(d) > limit else [])


def compare(old: dict, new: dict, show_code: bool = False) -> dict:
    r: dict = {"old": {k: old[k] for k in ("torch", "python", "executable")},
               "new": {k: new[k] for k in ("torch", "python", "executable")}}
    gb_old, gb_new = old["guard-builder"], new["guard-builder"]
    r["guard-builder"] = {
        "guard_methods": _code_members({k: v for k, v in gb_old.items() if _is_guard_method(k)},
                                       {k: v for k, v in gb_new.items() if _is_guard_method(k)},
                                       show_code),
        "other_methods": _code_members(
            {k: v for k, v in gb_old.items() if not _is_guard_method(k)},
            {k: v for k, v in gb_new.items() if not _is_guard_method(k)}, show_code),
    }
    for key in ("guards-functions", "check-function-manager", "guard-manager-wrapper"):
        r[key] = _code_members(old[key], new[key], show_code)
    r["signatures"] = {}
    for k in sorted(set(old["signatures"]) | set(new["signatures"])):
        a, b = old["signatures"].get(k), new["signatures"].get(k)
        if a == b:
            continue
        if a is None or b is None:
            r["signatures"][k] = {"added" if a is None else "removed": True}
            continue
        pa = {p.split(":")[0].split("=")[0].strip(): p for p in a["params"]}
        pb = {p.split(":")[0].split("=")[0].strip(): p for p in b["params"]}
        r["signatures"][k] = _values(pa, pb)
        if [n for n in pa if n in pb] != [n for n in pb if n in pa]:
            r["signatures"][k]["order_changed"] = [a["params"], b["params"]]
        if a["returns"] != b["returns"]:
            r["signatures"][k]["returns"] = [a["returns"], b["returns"]]
    r["guards-state"] = _values(old["guards-state"], new["guards-state"])
    r["closure-vars"] = _values(old["closure-vars"], new["closure-vars"])
    if old["numpy"] != new["numpy"]:
        r["closure-vars"]["note"] = (f"numpy is {'missing' if not new['numpy'] else 'present'} "
                                     f"in NEW's environment and {'missing' if not old['numpy'] else 'present'} "
                                     "in OLD's: __numpy_isnan follows it")

    so, sn = old["sources"], new["sources"]
    added, removed, common = _keys(so, sn)
    changed = {}
    for k in common:
        m = _code_members(so[k]["members"], sn[k]["members"], show_code)
        m.pop("text_only_changed", None)
        if so[k]["template"] != sn[k]["template"]:
            m["name_template"] = [so[k]["template"], sn[k]["template"]]
        if so[k]["bases"] != sn[k]["bases"]:
            m["bases"] = [so[k]["bases"], sn[k]["bases"]]
        if m:
            changed[k] = m
    ho, hn = set(old["handled-sources"]), set(new["handled-sources"])
    r["sources"] = {k: v for k, v in {
        "added": added, "removed": removed, "changed": changed,
        "handled_added": sorted(hn - ho), "handled_removed": sorted(ho - hn),
        "not_handled_new": sorted(set(added) - hn),
    }.items() if v}

    po, pn = old["pybind"], new["pybind"]
    added, removed, common = _keys(po["classes"], pn["classes"])
    methods = {}
    for k in common:
        m = _values(po["classes"][k]["methods"], pn["classes"][k]["methods"])
        if m:
            methods[k] = m
    r["pybind"] = {k: v for k, v in {
        "classes_added": {c: sorted(pn["classes"][c]["methods"]) for c in added},
        "classes_removed": removed,
        "methods": methods,
        "functions": _values(po["functions"], pn["functions"]),
        "others": _values(po["others"], pn["others"]),
    }.items() if v}
    yo, yn = old["pyi"], new["pyi"]
    added, removed, common = _keys(yo["classes"], yn["classes"])
    pyi_members = {k: v for k in common if (v := _values(yo["classes"][k], yn["classes"][k]))}
    r["pyi"] = {k: v for k, v in {
        "classes_added": {c: yn["classes"][c] for c in added}, "classes_removed": removed,
        "members": pyi_members, "functions": _values(yo["functions"], yn["functions"]),
    }.items() if v}

    guardish = set(old["config-read-by-guards"]) | set(new["config-read-by-guards"])
    co, cn = old["config"], new["config"]
    added, removed, common = _keys(co, cn)
    defaults = {k: [co[k]["default"], cn[k]["default"]] for k in common
                if co[k]["default"] != cn[k]["default"]}
    deprecated = [k for k in common if cn[k]["deprecated"] and not co[k]["deprecated"]]

    def guard_related(k):
        return k in guardish or "guard" in k

    r["config"] = {k: v for k, v in {
        "guard_related_defaults_changed": {k: v for k, v in defaults.items() if guard_related(k)},
        "other_defaults_changed": {k: v for k, v in defaults.items() if not guard_related(k)},
        "added": {k: cn[k]["default"] for k in added},
        "removed": {k: co[k]["default"] for k in removed},
        "newly_deprecated": deprecated,
    }.items() if v}

    r["tables"] = {k: v for k in ("dispatch_keys", "dtypes", "global_state_fields")
                   if (v := _values(old["tables"][k], new["tables"][k]))}

    ho, hn = old["headers"], new["headers"]
    added, removed, common = _keys(ho, hn)
    code = [k for k in common if ho[k]["code"] != hn[k]["code"]]
    r["headers"] = {k: v for k, v in {
        "added": added, "removed": removed,
        "code_changed": {k: _header_diff(ho[k]["path"], hn[k]["path"]) for k in code},
        "comments_only_changed": [k for k in common if ho[k]["code"] == hn[k]["code"]
                                  and ho[k]["text"] != hn[k]["text"]],
    }.items() if v}

    fo, fn = old["fingerprints"], new["fingerprints"]
    fp = {}
    for k in sorted(set(fo) | set(fn)):
        a, b = fo.get(k, {"missing": True}), fn.get(k, {"missing": True})
        e = {"user": b.get("user") or a.get("user")}
        if a.get("missing") and b.get("missing"):
            # A template of another release (torch 2.14.1's COW lambdas
            # diffed on 2.13.0): nothing to compare, nothing changed.
            e["bytecode_changed"] = False
            e["missing_in"] = ["old", "new"]
        elif a.get("missing") or b.get("missing"):
            e["missing_in"] = [w for w, x in (("old", a), ("new", b)) if x.get("missing")]
        else:
            e["bytecode_changed"] = a["bytecode"] != b["bytecode"]
            for f in ("names", "consts", "freevars"):
                if a[f] != b[f]:
                    e[f] = [a[f], b[f]]
            if "reviewed" in b:
                e["reviewed_in_old"], e["reviewed_in_new"] = a.get("reviewed"), b["reviewed"]
        fp[k] = e
    r["fingerprints"] = fp

    def empty(v):
        return not v or (isinstance(v, dict) and all(empty(x) for x in v.values()))

    fp_changed = any(e.get("bytecode_changed") or e.get("missing_in") not in (None, ["old", "new"])
                     or e.get("reviewed_in_new") is False for e in fp.values())
    r["changed"] = fp_changed or not all(
        empty(r[k]) for k in r if k not in ("old", "new", "fingerprints"))
    return r


# ---------------------------------------------------------------------------
# The report for people
# ---------------------------------------------------------------------------


def _wrap(items, indent="    ") -> list[str]:
    return textwrap.wrap(", ".join(items), 96, initial_indent=indent, subsequent_indent=indent) \
        if items else []


def render(r: dict) -> str:
    out = [f"torch {r['old']['torch']} -> {r['new']['torch']} "
           f"(Python {r['old']['python']} / {r['new']['python']})"]
    if not r["changed"]:
        out.append("no change in torch's guard machinery")

    def section(title, body):
        out.append("")
        out.append(title)
        out.extend(body or ["  no change"])

    def members(m, what="methods"):
        lines = []
        for key, label in (("added", "added"), ("removed", "removed"),
                           ("code_changed", "code changed"),
                           ("decorators_only_changed", "decorators only (guard check specs)"),
                           ("text_only_changed", "annotations/comments/docstrings only")):
            if m.get(key):
                lines.append(f"  {label} ({len(m[key])}):")
                lines += _wrap(m[key])
        for k, d in m.get("diffs", {}).items():
            lines.append(f"  diff of {k} (annotations, comments and docstrings dropped):")
            lines += ["      " + ln for ln in d]
        return lines

    def values(v, indent="  "):
        lines = []
        for k, x in v.get("added", {}).items():
            lines.append(f"{indent}+ {k} {x}")
        for k, x in v.get("removed", {}).items():
            lines.append(f"{indent}- {k} {x}")
        for k, (a, b) in v.get("changed", {}).items():
            lines.append(f"{indent}~ {k}: {a}  ->  {b}")
        return lines

    gb = r["guard-builder"]
    body = []
    if gb["guard_methods"]:
        body.append(" guard methods:")
        body += members(gb["guard_methods"])
    if gb["other_methods"]:
        body.append(" other methods:")
        body += members(gb["other_methods"])
    section("GuardBuilder (torch/_dynamo/guards.py)", body)
    section("guards.py module functions", members(r["guards-functions"]))
    section("CheckFunctionManager methods", members(r["check-function-manager"]))
    section("GuardManagerWrapper methods", members(r["guard-manager-wrapper"]))
    body = []
    for k, v in r["signatures"].items():
        body.append(f"  {k}:")
        body += [f"    + {p}" for p in v.get("added", {}).values()]
        body += [f"    - {p}" for p in v.get("removed", {}).values()]
        body += [f"    ~ {a}  ->  {b}" for a, b in v.get("changed", {}).values()]
        if v.get("order_changed"):
            body.append("    parameters reordered")
        if v.get("returns"):
            body.append(f"    returns {v['returns'][0]} -> {v['returns'][1]}")
    section("Signatures", body)
    section("GuardsState fields", values(r["guards-state"]))
    cv = values(r["closure-vars"])
    if r["closure-vars"].get("note"):
        cv.append("  note: " + r["closure-vars"]["note"])
    section("Guard closure variables (_get_closure_vars)", cv)

    s = r["sources"]
    body = []
    if s.get("added"):
        body += ["  added:"] + _wrap(s["added"])
    if s.get("removed"):
        body += ["  removed:"] + _wrap(s["removed"])
    for k, m in s.get("changed", {}).items():
        parts = [f"{lab} {', '.join(m[key])}" for key, lab in
                 (("added", "+"), ("removed", "-"), ("code_changed", "~")) if m.get(key)]
        if m.get("bases"):
            parts.append(f"bases {m['bases'][0]} -> {m['bases'][1]}")
        body.append(f"  changed {k}: {'; '.join(parts)}")
        if m.get("name_template"):
            body.append(f"    name: {m['name_template'][0]}  ->  {m['name_template'][1]}")
        for name, d in m.get("diffs", {}).items():
            body.append(f"    diff of {name}:")
            body += ["      " + ln for ln in d]
    if s.get("handled_added"):
        body += ["  now handled by get_guard_manager_from_source:"] + _wrap(s["handled_added"])
    if s.get("handled_removed"):
        body += ["  no longer handled by get_guard_manager_from_source:"] + _wrap(s["handled_removed"])
    if s.get("not_handled_new"):
        body += ["  new sources it does not name (built by other means, or unguarded):"] + \
            _wrap(s["not_handled_new"])
    section("Sources (torch/_dynamo/source.py)", body)

    p = r["pybind"]
    body = []
    for c, ms in p.get("classes_added", {}).items():
        body.append(f"  + class {c}: {', '.join(ms) or '(no methods)'}")
    for c in p.get("classes_removed", []):
        body.append(f"  - class {c}")
    for c, v in p.get("methods", {}).items():
        body.append(f"  {c}:")
        body += values(v, "    ")
    if p.get("functions"):
        body.append("  functions:")
        body += values(p["functions"], "    ")
    if p.get("others"):
        body.append("  other names:")
        body += values(p["others"], "    ")
    section("torch._C._dynamo.guards at run time (dir(), pybind signatures)", body)
    y = r["pyi"]
    body = []
    for c, ms in y.get("classes_added", {}).items():
        body.append(f"  + class {c}: {', '.join(ms) or '...'}")
    for c in y.get("classes_removed", []):
        body.append(f"  - class {c}")
    for c, v in y.get("members", {}).items():
        body.append(f"  {c}:")
        body += values(v, "    ")
    if y.get("functions"):
        body.append("  functions:")
        body += values(y["functions"], "    ")
    section("torch/_C/_dynamo/guards.pyi", body)

    c = r["config"]
    body = []
    for key, label in (("guard_related_defaults_changed", "guard-related defaults changed"),
                       ("other_defaults_changed", "other defaults changed")):
        if c.get(key):
            body.append(f"  {label}:")
            body += [f"    {k}: {a} -> {b}" for k, (a, b) in c[key].items()]
    for key, sign in (("added", "+"), ("removed", "-")):
        body += [f"  {sign} {k} = {v}" for k, v in c.get(key, {}).items()]
    if c.get("newly_deprecated"):
        body += ["  newly deprecated:"] + _wrap(c["newly_deprecated"])
    section("torch._dynamo.config", body)

    body = []
    for k, v in r["tables"].items():
        body.append(f"  {k}:")
        body += values(v, "    ")
    section("Tables (scripts/gen-torch-tables.py)", body)

    h = r["headers"]
    body = []
    for key, label in (("added", "added"), ("removed", "removed"),
                       ("comments_only_changed", "comments/whitespace only")):
        if h.get(key):
            body += [f"  {label}:"] + _wrap(h[key])
    for f, d in h.get("code_changed", {}).items():
        body.append(f"  code changed: {f}  (comments stripped)")
        body += ["      " + ln for ln in d]
    section("C++ headers (torch/include/torch/csrc/dynamo)", body)

    body = []
    for k, e in r["fingerprints"].items():
        if e.get("missing_in"):
            state = f"MISSING in {' and '.join(e['missing_in'])}"
        else:
            state = "bytecode CHANGED" if e["bytecode_changed"] else "same bytecode"
            extra = [f for f in ("names", "consts", "freevars") if f in e]
            if extra:
                state += f" ({', '.join(extra)} differ)"
            if "reviewed_in_new" in e:
                state += f"; pyattr's reviewed fingerprint: old {'yes' if e['reviewed_in_old'] else 'NO'}, " \
                         f"new {'yes' if e['reviewed_in_new'] else 'NO'}"
        body.append(f"  {k} [{e['user']}]: {state}")
    section("Functions guardjit fingerprints (python/guardjit/pyattr.py, lambdas.py)", body)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------


def run_extract(python: str) -> dict:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    p = subprocess.run([python, os.path.abspath(__file__), "--extract"], capture_output=True,
                       text=True, env=env, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"{python} --extract failed ({p.returncode}):\n{p.stderr[-4000:]}")
    return json.loads(p.stdout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Name what changed in torch's guard machinery between two torch installs.",
        epilog="Each PYTHON is an interpreter with the torch to compare (docs/porting.md).")
    ap.add_argument("old_python", nargs="?", help="interpreter with the old torch")
    ap.add_argument("new_python", nargs="?", help="interpreter with the new torch")
    ap.add_argument("--json", action="store_true", help="print the comparison as JSON")
    ap.add_argument("-o", "--output", help="write to this file instead of stdout")
    ap.add_argument("--show-code", action="store_true",
                    help="also show the diffs of the methods, functions and sources whose "
                         "code changed (annotations, comments and docstrings dropped)")
    ap.add_argument("--extract", action="store_true",
                    help="(internal) print what the running torch has, as JSON")
    args = ap.parse_args(argv)
    if args.extract:
        json.dump(extract(), sys.stdout, sort_keys=True)
        return 0
    if not args.old_python or not args.new_python:
        ap.error("OLD_PYTHON and NEW_PYTHON are required")
    if args.old_python == args.new_python:
        old = new = run_extract(args.old_python)
    else:
        with ThreadPoolExecutor(2) as pool:
            old, new = pool.map(run_extract, [args.old_python, args.new_python])
    report = compare(old, new, args.show_code)
    text = json.dumps(report, indent=1, sort_keys=True) + "\n" if args.json else render(report)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
