#!/usr/bin/env python3
"""The experiments behind docs/guard-semantics.md, re-runnable on any torch.

    scripts/guard-experiments.py                  # run them: a table for people
    scripts/guard-experiments.py --json -o F      # the same, for machines
    scripts/guard-experiments.py -k tensor        # only the ids containing "tensor"
    scripts/guard-experiments.py --markdown       # the doc's table, from the committed results
    scripts/guard-experiments.py --markdown --update docs/guard-semantics.md

Each experiment is a small function that builds guard managers directly
through torch's pybind API (torch._C._dynamo.guards: a RootGuardManager, its
accessors, add_*_guard and install_*_guard) or compiles a function with
torch.compile and a counting backend, and returns a short deterministic
string (no addresses, no timings). It names the section of
docs/guard-semantics.md it backs and the question it answers. An experiment
whose API this torch lacks answers "n/a: <why>"; one that raises unexpectedly
answers "ERROR: ..." and makes the run exit 1.

Results are committed per release as docs/results/guard-experiments-<release>.json
(tests/python/test_guard_experiments.py checks the running release against its
file). --markdown needs no torch: it merges those files into one table, a
column per release, and --update rewrites the table between the markers
<!-- guard-experiments:begin --> and <!-- guard-experiments:end --> of a file.

Run it without GUARDJIT=1: the experiments describe torch's own guards.
Result notation: T = the check passed, F = it failed, "raises X" = check()
raised X.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import json
import os
import re
import sys
import time
import warnings
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, os.pardir))
RESULTS_DIR = os.path.join(ROOT, "docs", "results")
BEGIN = "<!-- guard-experiments:begin -->"
END = "<!-- guard-experiments:end -->"


@dataclasses.dataclass
class Experiment:
    id: str
    section: str
    question: str
    fn: Callable[[], str]


EXPERIMENTS: list[Experiment] = []


def experiment(id: str, section: str, question: str):
    def register(fn):
        EXPERIMENTS.append(Experiment(id, section, question, fn))
        return fn
    return register


# ---------------------------------------------------------------------------
# Helpers (torch is imported by main(), after the GUARDJIT check)
# ---------------------------------------------------------------------------

torch = None  # set by _import_torch
C = None      # torch._C._dynamo.guards
_GX_CV = None  # the ContextVar of experiment contextvar-get, read as a global


def _import_torch():
    global torch, C
    import torch as _torch
    import torch._dynamo  # noqa: F401
    import torch._dynamo.testing  # noqa: F401
    from torch._C._dynamo import guards as _C
    torch, C = _torch, _C


def _gm():
    from torch._dynamo.guards import GuardManagerType
    return GuardManagerType.GUARD_MANAGER


def _dict_gm():
    from torch._dynamo.guards import GuardManagerType
    return GuardManagerType.DICT_GUARD_MANAGER


def _item(mgr, key, example):
    """The child of `mgr` reading mgr_value[key] (DictGetItemGuardAccessor)."""
    return mgr.dict_getitem_manager(key, f"L[{key!r}]", example, _gm())


def _check(root, value) -> str:
    state = torch._C._get_torch_function_state()
    try:
        return "T" if root.check(value) else "F"
    except Exception as e:  # the experiment reports what check() raised
        # A check that raises out of its accessors leaves torch function
        # disabled (experiment raise-torch-function-state): put it back.
        torch._C._set_torch_function_state(state)
        return f"raises {type(e).__name__}"


def _one(add, value, example=None, key="x") -> str:
    """A fresh root with one child L[key], `add(child)`, checked on {key: value}."""
    root = C.RootGuardManager()
    add(_item(root, key, value if example is None else example))
    return _check(root, {key: value})


def _kv(**kw) -> str:
    return " ".join(f"{k}={v}" for k, v in kw.items())


def _leaf_names(mgr) -> list[str]:
    return [type(g).__name__ for g in mgr.get_leaf_guards()]


def _strip_code_part(part: str) -> str:
    """A code part without its '# user source' comment and with ids masked."""
    part = part.split("  #")[0].strip()
    return re.sub(r"\b\d{6,}\b", "<id>", part)


def _compile(fn, *calls):
    """torch.compile(fn) with a counting backend over `calls` (argument
    tuples); returns (frame_count, the cache entries' roots, newest first)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    torch._dynamo.reset()
    cnt = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(fn, backend=cnt)
    for args in calls:
        compiled(*args)
    roots = [e.guard_manager.root for e in _debug_get_cache_entry_list(fn.__code__)]
    return cnt.frame_count, roots


def _find_leaves(mgr, kind: str, out=None) -> list[tuple[str, str]]:
    """(source, code part) of every leaf of `kind` in the tree under mgr."""
    out = [] if out is None else out
    for g in mgr.get_leaf_guards():
        if type(g).__name__ == kind:
            out.append((mgr.get_source(), _strip_code_part(g.verbose_code_parts()[0])))
    for child in mgr.get_child_managers():
        _find_leaves(child, kind, out)
    return out


def _find_manager(mgr, source: str):
    if mgr.get_source() == source:
        return mgr
    for child in mgr.get_child_managers():
        found = _find_manager(child, source)
        if found is not None:
            return found
    return None


def _excluded_autograd():
    return torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU))


class _BadBool:
    def __bool__(self):
        raise ValueError("no truth")


def _tensor_match(mgr, t, sizes=None, strides=None):
    mgr.add_tensor_match_guard(t, list(t.shape) if sizes is None else sizes,
                               list(t.stride()) if strides is None else strides,
                               "x", ["tm"], None, type(t), torch._C._dispatch_keys(t))


# ---------------------------------------------------------------------------
# §0 What Dynamo calls
# ---------------------------------------------------------------------------


@experiment("compiled-root-leaves", "0",
            "Which leaf guards does a compiled f(x, y) put on the root, and on each tensor's manager?")
def _():
    def f(x, y):
        return x + y
    _, roots = _compile(f, (torch.randn(2), torch.randn(2)))
    root = roots[0]
    x = _find_manager(root, "L['x']")
    return (f"root=[{', '.join(_leaf_names(root))}] epilogue={len(root.get_epilogue_lambda_guards())} "
            f"L['x']=[{', '.join(_leaf_names(x))}]")


# ---------------------------------------------------------------------------
# §1 RootGuardManager::check
# ---------------------------------------------------------------------------


@experiment("root-order", "1",
            "In what order do root leaves, accessors and epilogue lambdas run, and does a failing root leaf stop "
            "the check?")
def _():
    def build(first_leaf_passes):
        ran = []
        root = C.RootGuardManager()
        root.add_lambda_guard(lambda L: ran.append("leaf1") or first_leaf_passes, ["leaf1"], None)
        root.add_lambda_guard(lambda L: ran.append("leaf2") or True, ["leaf2"], None)
        _item(root, "x", 1).add_lambda_guard(lambda v: ran.append("accessor") or True, ["acc"], None)
        root.add_epilogue_lambda_guard(lambda L: ran.append("epilogue") or True, ["epi"], None)
        return root, ran
    root, ran = build(True)
    ok = _check(root, {"x": 1})
    root_f, ran_f = build(False)
    failed = _check(root_f, {"x": 1})
    return f"pass: {ok} {','.join(ran)}; leaf1 fails: {failed} {','.join(ran_f)}"


@experiment("root-torch-function", "1",
            "Is torch function enabled inside a root leaf lambda, an accessor's lambda and an epilogue lambda?")
def _():
    seen = {}

    def probe(name):
        def fn(_):
            seen[name] = torch._C._is_torch_function_enabled()
            return True
        return fn
    root = C.RootGuardManager()
    root.add_lambda_guard(probe("leaf"), ["leaf"], None)
    _item(root, "x", 1).add_lambda_guard(probe("accessor"), ["acc"], None)
    root.add_epilogue_lambda_guard(probe("epilogue"), ["epi"], None)
    _check(root, {"x": 1})
    return _kv(**seen)


@experiment("lambda-guard", "1",
            "How does LAMBDA_GUARD read its callable's result (falsy, raising, a raising __bool__), and what do "
            "root and epilogue lambdas receive from check(dict)?")
def _():
    def raises(_):
        raise KeyError("k")

    def one(fn):
        root = C.RootGuardManager()
        root.add_lambda_guard(fn, ["l"], None)
        return _check(root, {})
    results = _kv(**{"[]": one(lambda L: []), "'x'": one(lambda L: "x"), "0": one(lambda L: 0),
                     "raises": one(raises), "__bool__raises": one(lambda L: _BadBool())})
    got = {}
    root = C.RootGuardManager()
    root.add_lambda_guard(lambda L: got.__setitem__("leaf", L) or True, ["leaf"], None)
    root.add_epilogue_lambda_guard(lambda L: got.__setitem__("epilogue", L) or True, ["epi"], None)
    value = {"x": 1}
    _check(root, value)
    return f"{results}; leaf_gets_input={got['leaf'] is value} epilogue_gets_input={got['epilogue'] is value}"


@experiment("relational-reset", "1",
            "Is NO_TENSOR_ALIASING's state reset after every root check, passed or failed?")
def _():
    a, b = torch.randn(2), torch.randn(2)
    root = C.RootGuardManager()
    ma, mb = _item(root, "a", a), _item(root, "b", b)
    C.install_no_tensor_aliasing_guard([ma, mb], ["L['a']", "L['b']"], ["no alias"], None)
    seq = [{"a": a, "b": b}, {"a": a, "b": b}, {"a": a, "b": a}, {"a": a, "b": b}]
    return " ".join(_check(root, v) for v in seq) + " (a,b a,b a,a a,b)"


@experiment("raise-torch-function-state", "1",
            "When check() raises out of the accessor phase, is the caller's torch-function state restored?")
def _():
    def after(build, value):
        root = C.RootGuardManager()
        build(root)
        state = torch._C._get_torch_function_state()
        try:
            root.check(value)
            raised = "no raise"
        except Exception as e:
            raised = type(e).__name__
        enabled = torch._C._is_torch_function_enabled()
        torch._C._set_torch_function_state(state)
        return f"{raised}/{'enabled' if enabled else 'disabled'}"
    x = torch.zeros(1)
    x._has_dynamo_dim_marking = True
    x._dynamo_dynamic_indices = [0]
    return _kv(
        framelocals_non_dict=after(lambda r: r.framelocals_manager(("x", 0), "L['x']", 1, _gm()), [1]),
        dim_marking_list=after(lambda r: _item(r, "x", x).add_dimension_marking_guard(
            {"_dynamo_dynamic_indices": {0}}, [], {}, ["dim"], None), {"x": x}),
        dispatch_keys_tensor=after(lambda r: _item(r, "x", x).add_dispatch_key_set_guard(
            torch._C._dispatch_keys(x), ["dks"], None), {"x": x}),
        root_leaf_bool=after(lambda r: r.add_lambda_guard(lambda L: _BadBool(), ["l"], None), {}),
    )


# ---------------------------------------------------------------------------
# §2 GuardManager::check
# ---------------------------------------------------------------------------


@experiment("accessor-reorder", "2",
            "After a failure on a later accessor, are a manager's accessors reordered by fail count?")
def _():
    root = C.RootGuardManager()
    _item(root, "a", 1).add_equals_match_guard(1, ["a"], None)
    _item(root, "b", 2).add_equals_match_guard(2, ["b"], None)
    before = [m.get_source() for m in root.get_child_managers()]
    first = _check(root, {"a": 1, "b": 3})
    after = [m.get_source() for m in root.get_child_managers()]
    return f"before={','.join(before)} check={first} after={','.join(after)}"


@experiment("dict-tag-skip", "2",
            "Under an unchanged dict, which values' subtrees does DictGetItemGuardAccessor skip (lambda calls in 2 "
            "checks)?")
def _():
    values = {"int": 1, "str": "s", "tuple": (1, "a"), "None": None, "float": 1.5,
              "tensor": torch.zeros(1), "list": [1]}
    d = dict(values)
    root = C.RootGuardManager()
    dmgr = _item(root, "d", d)
    calls = {k: 0 for k in values}

    def counter(k):
        def fn(_):
            calls[k] += 1
            return True
        return fn
    for k, v in values.items():
        dmgr.dict_getitem_manager(k, f"L['d'][{k!r}]", v, _gm()).add_lambda_guard(counter(k), [k], None)
    _check(root, {"d": d})
    _check(root, {"d": d})
    return _kv(**calls)


# ---------------------------------------------------------------------------
# §3 Accessors
# ---------------------------------------------------------------------------


@experiment("framelocals-input", "3.1",
            "What does FrameLocalsGuardAccessor do with a dict subclass, a missing key and a non-dict input?")
def _():
    class D(dict):
        pass
    root = C.RootGuardManager()
    root.framelocals_manager(("x", 0), "L['x']", 1, _gm()).add_equals_match_guard(1, ["x == 1"], None)
    return _kv(dict=_check(root, {"x": 1}), subclass=_check(root, D(x=1)), missing=_check(root, {}),
               list=_check(root, [1]))


@experiment("accessor-error-cleared", "3",
            "Does an accessor whose read raises fail the check, with the error cleared?")
def _():
    class Obj:
        @property
        def boom(self):
            raise RuntimeError("boom")

        def __getitem__(self, k):
            raise KeyError(k)

    def raising(_):
        raise ValueError("x")
    results = {}
    for name, build in {
        "getattr": lambda m: m.getattr_manager("boom", "L['x'].boom", 1, _gm()),
        "getitem": lambda m: m.getitem_manager("k", "L['x']['k']", 1, _gm()),
        "lambda": lambda m: m.lambda_manager(raising, "f(L['x'])", 1, _gm()),
        "generic_dict": lambda m: m.get_generic_dict_manager("L['x'].__dict__", {}, _gm()),
    }.items():
        root = C.RootGuardManager()
        build(_item(root, "x", Obj())).add_lambda_guard(lambda v: True, ["t"], None)
        # A result with an error left set would make check() raise SystemError.
        results[name] = _check(root, {"x": Obj() if name != "generic_dict" else 5})
    return _kv(**results)


@experiment("globals-accessor", "3.2",
            "Does GlobalsGuardAccessor ignore the check's input and read the f_globals it was built with?")
def _():
    g = {"k": 1}
    root = C.RootGuardManager()
    root.globals_dict_manager(g, "G", g, _gm()).dict_getitem_manager("k", "G['k']", 1, _gm()) \
        .add_equals_match_guard(1, ["G['k'] == 1"], None)
    empty_input, non_dict_input = _check(root, {}), _check(root, 5)
    g["k"] = 2
    return _kv(empty_input=empty_input, non_dict_input=non_dict_input, changed_global=_check(root, {}))


@experiment("dict-getitem", "3.3",
            "DictGetItemGuardAccessor on a dict subclass overriding __getitem__, a non-dict, a missing key, a key "
            "whose __eq__ raises?")
def _():
    class D(dict):
        def __getitem__(self, k):
            return 2

    class BadKey:
        def __hash__(self):
            return hash("k")

        def __eq__(self, other):
            raise RuntimeError("eq")

    def add(m):
        m.dict_getitem_manager("k", "L['x']['k']", 1, _gm()).add_equals_match_guard(1, ["== 1"], None)
    return _kv(override=_one(add, D(k=1), {"k": 1}), list=_one(add, [1], {"k": 1}),
               missing=_one(add, {}, {"k": 1}), raising_eq=_one(add, {BadKey(): 1}, {"k": 1}))


@experiment("generic-dict", "3.4",
            "GetGenericDictGuardAccessor on an int, a __slots__ object, and an object whose "
            "__getattr__/__getattribute__ lie?")
def _():
    class Slots:
        __slots__ = ("a",)

    class Liar:
        def __getattribute__(self, name):
            return {"a": 2} if name == "__dict__" else object.__getattribute__(self, name)

    def add(m):
        m.get_generic_dict_manager("L['x'].__dict__", {}, _gm()).add_lambda_guard(
            lambda d: isinstance(d, dict) and "a" not in d, ["real dict"], None)
    return _kv(int=_one(add, 5, object()), slots=_one(add, Slots(), object()),
               lying_getattribute=_one(add, Liar(), object()))


@experiment("getattr-nn-module", "3.5",
            "getattr vs generic getattr on an nn.Module: a parameter, a plain attribute, a missing name?")
def _():
    lin = torch.nn.Linear(2, 2)

    def read(method, attr):
        def add(m):
            getattr(m, method)(attr, f"L['x'].{attr}", None, _gm()).add_not_none_guard(["not None"], None)
        return _one(add, lin, lin)
    return _kv(getattr_weight=read("getattr_manager", "weight"),
               generic_weight=read("generic_getattr_manager", "weight"),
               getattr_training=read("getattr_manager", "training"),
               generic_training=read("generic_getattr_manager", "training"),
               getattr_missing=read("getattr_manager", "nope"))


@experiment("function-accessors", "3.6",
            "code/func_defaults accessors: a bound method, a function without defaults, a non-function?")
def _():
    def no_defaults(a):
        return a

    def with_defaults(a=1):
        return a

    class K:
        def m(self, a=1):
            return a

    def read(method, value):
        def add(m):
            getattr(m, method)("acc", None, _gm()).add_lambda_guard(lambda v: True, ["t"], None)
        return _one(add, value, with_defaults)
    return _kv(code_bound_method=read("code_manager", K().m), code_builtin=read("code_manager", len),
               defaults_none=read("func_defaults_manager", no_defaults),
               defaults_present=read("func_defaults_manager", with_defaults),
               defaults_bound_method=read("func_defaults_manager", K().m))


@experiment("sequence-accessors", "3.8",
            "tuple/list getitem accessors: a negative index, the other sequence type, out of range; getitem on a "
            "custom __getitem__?")
def _():
    class G:
        def __getitem__(self, k):
            return 7

    def read(method, key, value):
        def add(m):
            getattr(m, method)(key, "acc", 7, _gm()).add_lambda_guard(lambda v: True, ["t"], None)
        return _one(add, value, (7,))
    return _kv(tuple_0=read("tuple_getitem_manager", 0, (7,)), tuple_neg1=read("tuple_getitem_manager", -1, (7,)),
               tuple_on_list=read("tuple_getitem_manager", 0, [7]),
               list_out_of_range=read("list_getitem_manager", 3, [7]),
               getitem_custom=read("getitem_manager", "k", G()))


@experiment("dict-guard-manager", "3.9",
            "DictGuardManager: a dict subclass, another size, reordered keys; are TYPE_MATCH and DICT_LENGTH added "
            "to it ignored?")
def _():
    from collections import OrderedDict
    ex = {"a": 1, "b": 2}
    root = C.RootGuardManager()
    dm = root.dict_getitem_manager("d", "L['d']", ex, _dict_gm())
    dm.add_type_match_guard(id(OrderedDict), ["type is OrderedDict"], None)
    dm.add_dict_length_check_guard(5, ["len == 5"], None)
    dm.get_key_manager(0, "key0", "a", _gm()).add_equals_match_guard("a", ["k0 == 'a'"], None)
    dm.get_value_manager(0, "val0", 1, _gm()).add_equals_match_guard(1, ["v0 == 1"], None)

    class D(dict):
        pass
    return _kv(same=_check(root, {"d": {"a": 1, "b": 2}}), leaves=len(dm.get_leaf_guards()),
               subclass=_check(root, {"d": D(a=1, b=2)}), bigger=_check(root, {"d": {"a": 1, "b": 2, "c": 3}}),
               reordered=_check(root, {"d": {"b": 2, "a": 1}}), value_changed=_check(root, {"d": {"a": 0, "b": 2}}))


# ---------------------------------------------------------------------------
# §4 Leaf guards
# ---------------------------------------------------------------------------


@experiment("identity-matches", "4",
            "TYPE_MATCH on a subclass; ID_MATCH's reference; second adds; NONE/TRUE/FALSE_MATCH by identity (1 vs "
            "True, 0 vs False); NOT_NONE on False?")
def _():
    class A:
        pass

    class B(A):
        pass
    a = A()
    root = C.RootGuardManager()
    m = _item(root, "x", a)
    m.add_type_match_guard(id(A), ["type"], None)
    m.add_type_match_guard(id(A), ["type again"], None)
    before = sys.getrefcount(a)
    m.add_id_match_guard(id(a), ["id"], None)
    m.add_id_match_guard(id(a), ["id again"], None)
    held = sys.getrefcount(a) - before
    def g(method, value):
        return _one(lambda mm: getattr(mm, method)(["c"], None), value)
    return _kv(same=_check(root, {"x": a}), subclass=_one(lambda mm: mm.add_type_match_guard(id(A), ["t"], None), B()),
               leaves_after_two_each=",".join(_leaf_names(m)), id_refs_held=held,
               true_1=g("add_true_match_guard", 1), true_True=g("add_true_match_guard", True),
               false_0=g("add_false_match_guard", 0), none_None=g("add_none_match_guard", None),
               not_none_False=g("add_not_none_guard", False), not_none_None=g("add_not_none_guard", None))


@experiment("equals-match", "4",
            "EQUALS_MATCH: bool vs int, float vs int, an int subclass, NaN (same and other object), a second add; a "
            "list mutated after the add (kept, not copied)?")
def _():
    class I(int):
        pass
    nan = float("nan")

    def eq(expected, value):
        return _one(lambda m: m.add_equals_match_guard(expected, ["eq"], None), value)
    root = C.RootGuardManager()
    m = _item(root, "x", 1)
    m.add_equals_match_guard(1, ["== 1"], None)
    m.add_equals_match_guard(2, ["== 2"], None)
    lst = [1, 2]
    lroot = C.RootGuardManager()
    _item(lroot, "x", lst).add_equals_match_guard(lst, ["== [1, 2]"], None)
    lst.append(3)
    return _kv(True_vs_1=eq(1, True), five_float=eq(5, 5.0), int_subclass=eq(5, I(5)), same_nan=eq(nan, nan),
               other_nan=eq(nan, float("nan")), second_add=f"{len(m.get_leaf_guards())}leaf:{_check(root, {'x': 1})}",
               list_old_contents=_check(lroot, {"x": [1, 2]}), list_mutated=_check(lroot, {"x": [1, 2, 3]}))


@experiment("length-check", "4",
            "LENGTH_CHECK (PySequence_Length) on a list, tuple, set, dict, int, a __len__ that raises; a dict "
            "against length -1?")
def _():
    class Bad:
        def __len__(self):
            raise RuntimeError("len")

    def n(value, length=2):
        return _one(lambda m: m.add_length_check_guard(length, ["len"], None), value)
    return _kv(list=n([1, 2]), tuple=n((1, 2)), set=n({1, 2}), dict=n({1: 1, 2: 2}), int=n(5), raising_len=n(Bad()),
               dict_vs_minus1=n({1: 1}, -1))


@experiment("set-subclass-length", "4",
            "A compiled loop over a set subclass whose __len__ lies: which length guard, and does adding an item "
            "recompile?")
def _():
    class LyingSet(set):
        def __len__(self):
            return 99

    def f(s):
        out = 0
        for i in s:
            out += i
        return torch.ones(1) + out
    _, roots = _compile(f, (LyingSet({1, 2, 3}),))
    parts = [p for _, p in _find_leaves(roots[0], "LENGTH_CHECK")]
    torch._dynamo.reset()
    cnt = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(f, backend=cnt)
    compiled(LyingSet({1, 2, 3}))
    bigger = LyingSet({1, 2, 3, 4})
    right = bool(torch.equal(compiled(bigger), f(bigger)))
    return f"guard={';'.join(parts)} frames({{1,2,3}} then {{1,2,3,4}})={cnt.frame_count} second_result_correct={right}"


@experiment("dict-contains-length", "4",
            "DICT_CONTAINS on a non-dict (contains=False / True), a dict subclass, an unhashable key, a second add; "
            "DICT_LENGTH on a subclass and a non-dict?")
def _():
    class D(dict):
        pass

    def c(contains, value):
        return _one(lambda m: m.add_dict_contains_guard(contains, "k", ["c"], None), value)
    root = C.RootGuardManager()
    m = _item(root, "x", {})
    m.add_dict_contains_guard(False, "k", ["a"], None)
    m.add_dict_contains_guard(False, "k", ["b"], None)
    def n(value):
        return _one(lambda mm: mm.add_dict_length_check_guard(1, ["len 1"], None), value, {"k": 1})
    unhashable = _one(lambda mm: mm.add_dict_contains_guard(False, [1], ["c"], None), {1: 1}, {})
    return _kv(nondict_False=c(False, 5), nondict_True=c(True, 5), subclass_True=c(True, D(k=1)),
               unhashable_key=unhashable,
               leaves_after_two=len(m.get_leaf_guards()), length_subclass=n(D(k=1)), length_list=n([1]))


@experiment("no-hasattr", "4",
            "NO_HASATTR when __getattr__ raises RuntimeError, AttributeError, or returns a value?")
def _():
    def make(behaviour):
        class O:
            def __getattr__(self, name):
                if behaviour == "runtime":
                    raise RuntimeError(name)
                if behaviour == "attribute":
                    raise AttributeError(name)
                return 1
        return O()
    return _kv(**{b: _one(lambda m: m.add_no_hasattr_guard("foo", ["no foo"], None), make(b))
                  for b in ("runtime", "attribute", "value")})


@experiment("ambient-guards", "4",
            "GLOBAL_STATE, TORCH_FUNCTION_MODE_STACK, DEFAULT_DEVICE added twice: kept twice? DEFAULT_DEVICE under "
            "set_default_device / `with torch.device`? The mode stack guard under another mode instance or class?")
def _():
    from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack
    root = C.RootGuardManager()
    g = C.GlobalStateGuard()
    for _ in range(2):
        root.add_global_state_guard(g, ["gs"], None)
        root.add_torch_function_mode_stack_guard([], ["tf"], None)
        root.add_default_device_guard(["dd"], None)
    kept = len(root.get_leaf_guards())

    dd = C.RootGuardManager()
    dd.add_default_device_guard(["dd"], None)
    with torch.device("meta"):
        inside_with = _check(dd, {})
    torch.set_default_device("meta")
    try:
        after_set = _check(dd, {})
    finally:
        torch.set_default_device(None)

    class M1(TorchFunctionMode):
        pass

    class M2(TorchFunctionMode):
        pass
    with M1():
        stack = C.RootGuardManager()
        stack.add_torch_function_mode_stack_guard(_get_current_function_mode_stack(), ["stack"], None)
    with M1():
        same_class = _check(stack, {})
    with M2():
        other_class = _check(stack, {})
    return _kv(leaves_after_two_each=kept, device_with=inside_with, device_set_default=after_set,
               device_restored=_check(dd, {}), mode_same_class=same_class, mode_other_class=other_class,
               mode_none=_check(stack, {}))


@experiment("dispatch-key-set-match", "4",
            "DISPATCH_KEY_SET_MATCH: the same keys, other keys, a Tensor value, and under an excluded AutogradCPU?")
def _():
    ks = torch._C._dispatch_keys(torch.randn(1))
    root = C.RootGuardManager()
    _item(root, "x", ks).add_dispatch_key_set_guard(ks, ["dks"], None)
    with _excluded_autograd():
        excluded = _check(root, {"x": ks})
    sparse_keys = torch._C._dispatch_keys(torch.randn(1).to_sparse())
    return _kv(same=_check(root, {"x": ks}), other=_check(root, {"x": sparse_keys}),
               tensor=_check(root, {"x": torch.randn(1)}), excluded=excluded)


@experiment("dimension-marking", "4.1",
            "DIMENSION_DYNAMIC_MARKING: no flag, flag without compile-time markings, subset/superset, a list, "
            "dependent attrs?")
def _():
    attrs = ["_dynamo_dynamic_indices", "_dynamo_weak_dynamic_indices", "_dynamo_unbacked_indices",
             "_dynamo_strict_unbacked_indices", "_dynamo_static_indices"]

    def t(**kw):
        x = torch.zeros(2, 2)
        for k, v in kw.items():
            setattr(x, k, v)
        return x

    def guard(expected, dependent=None):
        absent = [a for a in attrs if a not in expected]
        return lambda m: m.add_dimension_marking_guard(expected, absent, dependent or {}, ["dim"], None)
    unmarked = guard({})
    marked = guard({"_dynamo_dynamic_indices": {0}})
    dep = guard({"_dynamo_unbacked_indices": {0}}, {"_dynamo_shape_ids": ({0: 1}, "_dynamo_unbacked_indices")})
    ex = torch.zeros(2, 2)
    return _kv(
        no_flag=_one(unmarked, t(_dynamo_dynamic_indices={0}), ex),
        flag_False_unmarked=_one(unmarked, t(_has_dynamo_dim_marking=False), ex),
        subset=_one(marked, t(_has_dynamo_dim_marking=True, _dynamo_dynamic_indices={0}), ex),
        superset=_one(marked, t(_has_dynamo_dim_marking=True, _dynamo_dynamic_indices={0, 1}), ex),
        absent=_one(marked, t(_has_dynamo_dim_marking=True), ex),
        other_absent_present=_one(marked, t(_has_dynamo_dim_marking=True, _dynamo_static_indices={1}), ex),
        list=_one(marked, t(_has_dynamo_dim_marking=True, _dynamo_dynamic_indices=[0]), ex),
        dep_equal=_one(dep, t(_has_dynamo_dim_marking=True, _dynamo_unbacked_indices={0},
                              _dynamo_shape_ids={0: 1}), ex),
        dep_other=_one(dep, t(_has_dynamo_dim_marking=True, _dynamo_unbacked_indices={0},
                              _dynamo_shape_ids={0: 2}), ex),
    )


# ---------------------------------------------------------------------------
# §5 TENSOR_MATCH
# ---------------------------------------------------------------------------


@experiment("tensor-match-fields", "5",
            "Which differences fail TENSOR_MATCH (dtype, requires_grad, size, stride, storage offset, a subclass, "
            "an inference tensor); sizes=[] and None; sparse CSR strides?")
def _():
    x = torch.randn(3, 4)
    base = torch.randn(20)

    class Sub(torch.Tensor):
        pass
    with torch.inference_mode():
        inference = torch.randn(3, 4)

    def tm(value, sizes=None, strides=None):
        return _one(lambda m: _tensor_match(m, x, sizes, strides), value, x)

    def csr(value, strides):
        return _one(lambda m: _tensor_match(m, value, [3, 3], strides), value, value)
    return _kv(same_meta=tm(torch.randn(3, 4)), dtype=tm(torch.randn(3, 4, dtype=torch.float64)),
               requires_grad=tm(torch.randn(3, 4, requires_grad=True)), size=tm(torch.randn(3, 5)),
               stride=tm(torch.randn(4, 3).t()), offset=tm(base[2:14].view(3, 4)),
               subclass=tm(torch.randn(3, 4).as_subclass(Sub)), inference=tm(inference),
               empty_sizes_other_shape=tm(torch.randn(3, 5), [], []),
               none_size=tm(torch.randn(7, 4), [None, 4], [None, 1]),
               csr_none_strides=csr(torch.eye(3).to_sparse_csr(), [None, None]),
               csr_concrete_strides=csr(torch.eye(3).to_sparse_csr(), [3, 1]))


@experiment("tensor-match-tls", "5",
            "A TENSOR_MATCH built normally, checked under an excluded AutogradCPU key, no_grad, a TorchDispatchMode?")
def _():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    x = torch.randn(2)
    root = C.RootGuardManager()
    _tensor_match(_item(root, "x", x), x)
    out = {"plain": _check(root, {"x": x})}
    with _excluded_autograd():
        out["excluded_autograd"] = _check(root, {"x": x})
    with torch.no_grad():
        out["no_grad"] = _check(root, {"x": x})
    with Mode():
        out["dispatch_mode"] = _check(root, {"x": x})
    return _kv(**out)


@experiment("root-local-state", "5",
            "A root given (set_local_state) a LocalState captured under an excluded AutogradCPU: does a "
            "TENSOR_MATCH / DISPATCH_KEY_SET_MATCH added to it apply that state (checked plain/excluded)?")
def _():
    if not hasattr(C.RootGuardManager, "set_local_state"):
        return "n/a: RootGuardManager has no get_local_state/set_local_state"
    with _excluded_autograd():
        state = C.RootGuardManager().get_local_state()
    x = torch.randn(2)
    ks = torch._C._dispatch_keys(x)
    out = {}
    for kind in ("tensor", "dispatch_keys"):
        root = C.RootGuardManager()
        root.set_local_state(state)
        if kind == "tensor":
            _tensor_match(_item(root, "x", x), x)
            value = {"x": x}
        else:
            _item(root, "x", ks).add_dispatch_key_set_guard(ks, ["dks"], None)
            value = {"x": ks}
        plain = _check(root, value)
        with _excluded_autograd():
            excluded = _check(root, value)
        out[kind] = f"{plain}/{excluded}"
    return _kv(**out)


@experiment("local-state-build-time", "5",
            "Added outside an excluded AutogradCPU to a root created inside it, checked plain/excluded: does a "
            "TENSOR_MATCH / DISPATCH_KEY_SET_MATCH apply the TLS of its own build (T/F) or the root's (F/T)?")
def _():
    x = torch.randn(2)
    ks = torch._C._dispatch_keys(x)
    out = {}
    for kind in ("tensor", "dispatch_keys"):
        with _excluded_autograd():
            root = C.RootGuardManager()
        if kind == "tensor":
            _tensor_match(_item(root, "x", x), x)
            value = {"x": x}
        else:
            _item(root, "x", ks).add_dispatch_key_set_guard(ks, ["dks"], None)
            value = {"x": ks}
        plain = _check(root, value)
        with _excluded_autograd():
            excluded = _check(root, value)
        out[kind] = f"{plain}/{excluded}"
    return _kv(**out)


# ---------------------------------------------------------------------------
# §6 GLOBAL_STATE
# ---------------------------------------------------------------------------


@experiment("global-state-json", "6",
            "Which fields does GlobalStateGuard's JSON carry (keys, and autocast's per-device list length)?")
def _():
    state = json.loads(C.GlobalStateGuard().__getstate__())
    keys = sorted(state)
    return f"{','.join(keys)}; autocast devices={len(state['autocast_state']['enabled'])}"


@experiment("global-state-changes", "6",
            "Which global changes fail GLOBAL_STATE?")
def _():
    checks = {}

    def setting(name, enter, leave):
        g = C.GlobalStateGuard()
        enter()
        try:
            checks[name] = "T" if g.check() else "F"
        finally:
            leave()
    grad = torch.is_grad_enabled()
    setting("grad_mode", lambda: torch.set_grad_enabled(not grad), lambda: torch.set_grad_enabled(grad))
    cpu_dtype = torch.get_autocast_dtype("cpu")
    setting("autocast_dtype_while_disabled", lambda: torch.set_autocast_dtype("cpu", torch.float16),
            lambda: torch.set_autocast_dtype("cpu", cpu_dtype))
    setting("autocast_enabled", lambda: torch.set_autocast_enabled("cpu", True),
            lambda: torch.set_autocast_enabled("cpu", False))
    cache = torch.is_autocast_cache_enabled()
    setting("autocast_cache", lambda: torch.set_autocast_cache_enabled(not cache),
            lambda: torch.set_autocast_cache_enabled(cache))
    sub = torch._C.DisableTorchFunctionSubclass()
    setting("DisableTorchFunctionSubclass", sub.__enter__, lambda: sub.__exit__(None, None, None))
    det = torch.are_deterministic_algorithms_enabled()
    setting("deterministic", lambda: torch.use_deterministic_algorithms(not det),
            lambda: torch.use_deterministic_algorithms(det))
    prec = torch.get_float32_matmul_precision()
    setting("matmul_precision_high", lambda: torch.set_float32_matmul_precision("high"),
            lambda: torch.set_float32_matmul_precision(prec))
    cudnn = torch.backends.cudnn.allow_tf32
    setting("cudnn_allow_tf32", lambda: setattr(torch.backends.cudnn, "allow_tf32", not cudnn),
            lambda: setattr(torch.backends.cudnn, "allow_tf32", cudnn))
    matmul = torch.backends.cuda.matmul
    fp16 = matmul.allow_fp16_reduced_precision_reduction
    setting("fp16_reduce_False", lambda: setattr(matmul, "allow_fp16_reduced_precision_reduction", False),
            lambda: setattr(matmul, "allow_fp16_reduced_precision_reduction", fp16))
    threads = torch.get_num_threads()
    setting("num_threads", lambda: torch.set_num_threads(threads + 1), lambda: torch.set_num_threads(threads))
    dtype = torch.get_default_dtype()
    setting("default_dtype", lambda: torch.set_default_dtype(torch.float64), lambda: torch.set_default_dtype(dtype))
    return _kv(**checks)


# ---------------------------------------------------------------------------
# §7 Aliasing guards and epilogue lambdas
# ---------------------------------------------------------------------------


@experiment("aliasing-option-default", "7",
            "What is the default of torch._dynamo.config.use_lamba_guard_for_object_aliasing?")
def _():
    return str(torch._dynamo.config.use_lamba_guard_for_object_aliasing)


@experiment("aliasing-compiled-form", "7",
            "How is f(m, m) (one nn.Module twice) guarded: an epilogue lambda or OBJECT_ALIASING leaves, by option "
            "value?")
def _():
    def f(a, b):
        return a.weight.sum() + b.weight.sum()
    lin = torch.nn.Linear(2, 2)
    out = []
    for option in ("default", True, False):
        ctx = contextlib.nullcontext() if option == "default" else \
            torch._dynamo.config.patch(use_lamba_guard_for_object_aliasing=option)
        with ctx:
            _, roots = _compile(f, (lin, lin))
        root = roots[0]
        epi = [_strip_code_part(g.verbose_code_parts()[0]) for g in root.get_epilogue_lambda_guards()]
        leaves = [s for s, _ in _find_leaves(root, "OBJECT_ALIASING")]
        out.append(f"{option}: epilogue={epi} OBJECT_ALIASING={leaves}")
    return "; ".join(out)


@experiment("relational-guards", "7",
            "NO_TENSOR_ALIASING: identity only (two views of one storage pass)? OBJECT_ALIASING: passes iff the "
            "same object, re-armed per check?")
def _():
    base = torch.randn(4)
    a, b = torch.randn(2), torch.randn(2)
    root = C.RootGuardManager()
    ma, mb = _item(root, "a", a), _item(root, "b", b)
    C.install_no_tensor_aliasing_guard([ma, mb], ["L['a']", "L['b']"], ["no alias"], None)
    o, p = object(), object()
    oroot = C.RootGuardManager()
    C.install_object_aliasing_guard(_item(oroot, "a", o), _item(oroot, "b", o), ["a is b"], None)
    seq = [{"a": o, "b": o}, {"a": o, "b": p}, {"a": p, "b": p}]
    return (_kv(views=_check(root, {"a": base[:2], "b": base[:2]}), same=_check(root, {"a": base, "b": base}),
                leaves_a=",".join(_leaf_names(ma)))
            + "; object_aliasing(o,o o,p p,p)=" + " ".join(_check(oroot, v) for v in seq))


# ---------------------------------------------------------------------------
# §8 Symbolic shape guards
# ---------------------------------------------------------------------------


@experiment("shape-guards-form", "8",
            "With dynamic=True, are shape guards one epilogue lambda (enable_cpp_symbolic_shape_guards default) or "
            "C++?")
def _():
    def f(x, y):
        return torch.cat([x, y])
    torch._dynamo.reset()
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    compiled = torch.compile(f, backend="eager", dynamic=True)
    compiled(torch.randn(3), torch.randn(4))
    root = _debug_get_cache_entry_list(f.__code__)[0].guard_manager.root
    epi = root.get_epilogue_lambda_guards()
    shape_parts = [p for g in epi for p in g.verbose_code_parts() if "size()" in p]
    return (f"cpp_default={torch._dynamo.config.enable_cpp_symbolic_shape_guards} epilogue={len(epi)} "
            f"shape_parts={len(shape_parts)} symbolic_leaves={len(_find_leaves(root, 'SYMBOLIC_SHAPE_GUARD'))}")


# ---------------------------------------------------------------------------
# §9 Nested functions, transformers: DICT_VERSION, NaN
# ---------------------------------------------------------------------------


@experiment("dict-version", "9",
            "dict_version / DICT_VERSION: same value stored again, another value, delete and re-add, a subclass?")
def _():
    dv = C.dict_version
    d = {"a": 1, "b": [0]}
    v0 = dv(d)
    d["b"] = d["b"]
    same_again = dv(d) == v0
    d["a"] = 2
    other = dv(d) != v0
    e = {"a": 1}
    v1 = dv(e)
    del e["a"]
    e["a"] = 1
    readd = dv(e) != v1

    class D(dict):
        pass
    sub = D(a=1)
    root = C.RootGuardManager()
    _item(root, "x", sub).add_dict_version_guard(sub, ["version"], None)
    ok = _check(root, {"x": sub})
    sub["a"] = 2
    return _kv(same_value_keeps_tag=same_again, new_value_new_tag=other, readd_new_tag=readd,
               subclass=ok, subclass_mutated=_check(root, {"x": sub}))


@experiment("nan-guards", "9",
            "FLOAT_IS_NAN / COMPLEX_IS_NAN: a float subclass, a non-NaN, a second add?")
def _():
    class F(float):
        pass
    nan = float("nan")

    def f(value):
        return _one(lambda m: m.add_float_is_nan_guard(["nan"], None), value, nan)
    root = C.RootGuardManager()
    m = _item(root, "x", nan)
    m.add_float_is_nan_guard(["a"], None)
    m.add_float_is_nan_guard(["b"], None)
    c = _one(lambda mm: mm.add_complex_is_nan_guard(["cnan"], None), complex(1, nan), complex(nan, 0))
    return _kv(nan=f(nan), subclass=f(F(nan)), one=f(1.0), complex_imag_nan=c,
               leaves_after_two=len(m.get_leaf_guards()))


@experiment("contextvar-get", "9",
            "A compiled read of ContextVar.get(): which guard sources it, and does a new value recompile?")
def _():
    import contextvars
    global _GX_CV
    cv = _GX_CV = contextvars.ContextVar("gx_cv", default=3)

    def f(x):
        return x * _GX_CV.get()
    _, roots = _compile(f, (torch.ones(1),))
    sources = sorted({s + ":" + k for k in ("EQUALS_MATCH", "TYPE_MATCH", "ID_MATCH")
                      for s, _ in _find_leaves(roots[0], k) if "_GX_CV" in s})
    torch._dynamo.reset()
    cnt = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(f, backend=cnt)
    compiled(torch.ones(1))
    token = cv.set(5)
    try:
        compiled(torch.ones(1))
    finally:
        cv.reset(token)
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    entries = len(_debug_get_cache_entry_list(f.__code__))
    # One entry of f and two graphs: f graph-breaks at cv.get() and the resume
    # function recompiles on the new value.
    return f"guards_on_cv={sources} graphs(3 then 5)={cnt.frame_count} entries_of_f={entries}"


# ---------------------------------------------------------------------------
# §10 The remaining kinds
# ---------------------------------------------------------------------------


@experiment("collection-guards", "10",
            "RANGE_ITERATOR_MATCH on iter(range(2, 9, 2)) vs [2, 10, 2]; TUPLE_ITERATOR_LEN after next(); "
            "SET_CONTAINS on a subclass, a frozenset, a non-set?")
def _():
    rit = iter(range(2, 9, 2))
    tit = iter((1, 2, 3))
    r = _one(lambda m: m.add_range_iterator_match_guard(2, 10, 2, id(type(rit)), ["range"], None), rit)
    t = _one(lambda m: m.add_tuple_iterator_length_guard(3, id(type(tit)), ["len 3"], None), tit)
    next(tit)
    t_after = _one(lambda m: m.add_tuple_iterator_length_guard(3, id(type(tit)), ["len 3"], None), tit)

    class S(set):
        pass

    def c(contains, value):
        return _one(lambda m: m.add_set_contains_guard(contains, 3, ["3 in s"], None), value, {3})
    return _kv(range_2_9_2_vs_2_10_2=r, tuple_iter_len3=t, after_next=t_after,
               set_subclass=c(True, S({3})), frozenset=c(True, frozenset({3})), nonset_False=c(False, [3]),
               nonset_True=c(True, [3]))


# ---------------------------------------------------------------------------
# §12 Dynamo's Python lambdas
# ---------------------------------------------------------------------------


@experiment("saved-tensors-hooks-guard", "12",
            "What is the ambient AUTOGRAD_SAVED_TENSORS_HOOKS guard of a compiled function (kind and code part)?")
def _():
    def f(x):
        return x + 1
    _, roots = _compile(f, (torch.randn(1),))
    root = roots[0]
    parts = [(type(g).__name__, _strip_code_part(g.verbose_code_parts()[0])) for g in root.get_leaf_guards()
             if "saved_tensors_hooks" in g.verbose_code_parts()[0]]
    return "; ".join(f"{k}: {p}" for k, p in parts)


@experiment("cow-tensor-match", "12",
            "torch._C._is_cow_tensor(x) in a compiled function: which guard, and does a non-COW input recompile?")
def _():
    from torch._dynamo.guards import GuardBuilder
    if not hasattr(GuardBuilder, "COW_TENSOR_MATCH"):
        return "n/a: GuardBuilder has no COW_TENSOR_MATCH"

    def f(x):
        return x + 1 if torch._C._is_cow_tensor(x) else x - 1
    cow = torch._lazy_clone(torch.randn(3))
    _, roots = _compile(f, (cow,))
    parts = [f"{type(g).__name__}: {_strip_code_part(g.verbose_code_parts()[0])}"
             for g in _find_manager(roots[0], "L['x']").get_leaf_guards()
             if "___cow" in _strip_code_part(g.verbose_code_parts()[0])]
    frames, _ = _compile(f, (cow,), (torch.randn(3),), (torch._lazy_clone(torch.randn(3)),))
    return f"{'; '.join(parts)}; frames(cow, plain, cow)={frames}"


# ---------------------------------------------------------------------------
# §13 nn.Module attribute reads
# ---------------------------------------------------------------------------


@experiment("module-hasattr", "13",
            "hasattr(module, name) in a compiled function: which guard, and does adding the attribute recompile?")
def _():
    class M(torch.nn.Module):
        def forward(self, x):
            return x + 1 if hasattr(self, "extra") else x - 1
    m = M()
    x = torch.randn(1)
    _, roots = _compile(m.forward.__func__, (m, x))
    kinds = sorted({f"{s}:{k}" for k in ("NO_HASATTR",) for s, _ in _find_leaves(roots[0], k)})
    torch._dynamo.reset()
    cnt = torch._dynamo.testing.CompileCounter()
    compiled = torch.compile(m, backend=cnt)
    compiled(x)
    m.extra = 1
    compiled(x)
    return f"guards={kinds} frames(before, after adding)={cnt.frame_count}"


# ---------------------------------------------------------------------------
# Running and reporting
# ---------------------------------------------------------------------------


def release_of(version: str) -> str:
    return version.split("+")[0]


def run(selected: list[Experiment]) -> dict:
    results = []
    errors = 0
    for e in selected:
        before = C.GlobalStateGuard()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = e.fn()
            if not before.check():  # the next experiments would see another state
                raise RuntimeError(f"left the global state changed: {before.reason().strip()}")
        except Exception as exc:  # reported, and the run exits 1
            errors += 1
            result = f"ERROR: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        finally:
            torch._dynamo.reset()
        results.append({"id": e.id, "section": e.section, "question": e.question, "result": result})
    return {"torch": torch.__version__, "release": release_of(torch.__version__),
            "python": ".".join(map(str, sys.version_info[:3])), "experiments": results, "errors": errors}


def print_table(report: dict, out) -> None:
    rows = report["experiments"]
    width = max(len(r["id"]) for r in rows)
    out.write(f"torch {report['torch']}, Python {report['python']}: {len(rows)} experiments\n\n")
    for r in rows:
        out.write(f"{r['id']:<{width}}  §{r['section']:<4} {r['result']}\n")


def _version_key(release: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in release.split("."))


def load_results(results_dir: str) -> list[dict]:
    reports = []
    for path in glob.glob(os.path.join(results_dir, "guard-experiments-*.json")):
        with open(path, encoding="utf-8") as f:
            reports.append(json.load(f))
    return sorted(reports, key=lambda r: _version_key(r["release"]))


def _cell(text: str, code: bool = False) -> str:
    """Text for a table cell: a result as code, a question with its dunder
    names as code (markdown would read __x__ as bold)."""
    text = text.replace("|", "\\|").replace("\n", " ")
    if code:
        return f"`{text}`" if "`" not in text else f"`` {text} ``"
    return re.sub(r"(?<![\w`])(__\w+?__)(?![\w`])", r"`\1`", text)


def _section_key(section: str) -> tuple:
    return tuple(int(p) for p in section.split("."))


def markdown(reports: list[dict]) -> str:
    """One row per experiment id, by section (within one, in the newest
    report's order), a column per release, ≠ where the results differ."""
    if not reports:
        raise SystemExit(f"no docs/results/guard-experiments-*.json in {RESULTS_DIR}")
    by_release = [{r["id"]: r for r in rep["experiments"]} for rep in reports]
    ids: list[str] = []
    for rep in reversed(reports):
        for r in rep["experiments"]:
            if r["id"] not in ids:
                ids.append(r["id"])
    meta = {}
    for table in by_release:
        meta.update(table)
    ids.sort(key=lambda i: _section_key(meta[i]["section"]))
    releases = [rep["release"] for rep in reports]
    lines = [
        "<!-- generated by scripts/guard-experiments.py --markdown from "
        + ", ".join(f"docs/results/guard-experiments-{r}.json" for r in releases) + ": do not edit -->",
        "T: the check passed; F: it failed; \"raises X\": `check()` raised X; n/a: the release lacks the API; "
        "≠: the releases differ.",
        "",
        "| id | § | question | " + " | ".join(f"torch {r}" for r in releases) + " | ≠ |",
        "|---|---|---|" + "---|" * len(releases) + "---|",
    ]
    for i in ids:
        cells = [table[i]["result"] if i in table else "(not run)" for table in by_release]
        differs = "≠" if len(set(cells)) > 1 else ""
        lines.append(f"| `{i}` | §{meta[i]['section']} | {_cell(meta[i]['question'])} | "
                     + " | ".join(_cell(c, code=True) for c in cells) + f" | {differs} |")
    return "\n".join(lines) + "\n"


def update(path: str, table: str) -> bool:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} markers to write between")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{table}{END}{tail}"
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--json", action="store_true", help="write the results as JSON")
    ap.add_argument("-o", "--output", help="file to write (default: stdout)")
    ap.add_argument("-k", dest="only", action="append", default=[],
                    help="run only the experiments whose id contains this (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the experiments and exit")
    ap.add_argument("--markdown", action="store_true",
                    help="print the doc's table, merged from the committed results (needs no torch)")
    ap.add_argument("--results-dir", default=RESULTS_DIR, help="where --markdown reads the results")
    ap.add_argument("--update", metavar="DOC", help="with --markdown: rewrite the table between the markers of DOC")
    args = ap.parse_args(argv)

    if args.update and not args.markdown:
        ap.error("--update goes with --markdown")
    if args.markdown:
        table = markdown(load_results(args.results_dir))
        if args.update:
            changed = update(args.update, table)
            print(f"{args.update}: {'updated' if changed else 'unchanged'}")
        else:
            sys.stdout.write(table)
        return 0
    if args.list:
        for e in EXPERIMENTS:
            print(f"{e.id:<28} §{e.section:<4} {e.question}")
        return 0

    if os.environ.get("GUARDJIT", "") not in ("", "0"):
        sys.stderr.write("guard-experiments: unset GUARDJIT: the experiments describe torch's own guards\n")
        return 2
    _import_torch()
    selected = [e for e in EXPERIMENTS if not args.only or any(k in e.id for k in args.only)]
    start = time.monotonic()
    report = run(selected)
    elapsed = time.monotonic() - start
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        if args.json:
            json.dump({k: v for k, v in report.items() if k != "errors"}, out, indent=1, ensure_ascii=False)
            out.write("\n")
        else:
            print_table(report, out)
    finally:
        if args.output:
            out.close()
    errors = f", {report['errors']} errors" if report["errors"] else ""
    sys.stderr.write(f"guard-experiments: {len(selected)} experiments in {elapsed:.1f} s{errors}\n")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
