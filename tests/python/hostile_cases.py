"""Hostile-input cases for test_hostile.py, run in a child process.

``python hostile_cases.py CASE...`` runs each case and prints one JSON line per
case: ``{"case": name, "steps": [...], "frames": n, "guardjit": {...}}``. Each
step is one call: ``eager`` (the function run without compiling, on the same
objects) and ``compiled`` (the torch.compile'd function), each ``["ok", value]``
or ``["raise", exception type name]``, and ``frames``, Dynamo's count of frames
compiled so far (``counters["frames"]["ok"]``): a guard that fails makes it
grow. The process is started with ``GUARDJIT=1`` (torch.compile goes through
guardjit) or without (plain torch); the test compares the two. Nothing here
imports guardjit unless GUARDJIT=1 did.
"""

from __future__ import annotations

import json
import os
import sys
import types

import torch
import torch._dynamo
from torch._dynamo.utils import counters


def _value(r):
    if isinstance(r, torch.Tensor):
        return [round(float(v), 5) for v in r.detach().reshape(-1).tolist()]
    return repr(r)


def _outcome(f, *args):
    try:
        return ["ok", _value(f(*args))]
    except Exception as e:  # noqa: BLE001 - the exception's type is the answer
        return ["raise", type(e).__name__]


class _Case:
    def __init__(self, fn):
        self.fn = fn
        self.opt = torch.compile(fn, backend="eager")
        self.steps = []
        self.reused = None  # address-reuse cases: whether the address came back

    def call(self, *args):
        eager = _outcome(self.fn, *args)
        compiled = _outcome(self.opt, *args)
        self.steps.append({"eager": eager, "compiled": compiled,
                           "frames": counters["frames"]["ok"]})


class EvilEq:
    """A key that collides with ``name``'s hash and raises from ``__eq__``."""

    armed = False  # set once every dict under test is built

    def __init__(self, name, exc=RuntimeError):
        self.name, self.exc = name, exc

    def __hash__(self):
        return hash(self.name)

    def __eq__(self, other):
        if EvilEq.armed:
            raise self.exc("hostile __eq__")
        return False


def _disarmed(fn):
    """Runs fn() with EvilEq disarmed (building the dicts), then arms it."""
    EvilEq.armed = False
    try:
        return fn()
    finally:
        EvilEq.armed = True


def _dict(*pairs):
    return _disarmed(lambda: dict(pairs))


class EvilHash:
    def __hash__(self):
        raise RuntimeError("hostile __hash__")

    def __eq__(self, other):
        raise RuntimeError("hostile __eq__")


X = torch.arange(4.0)


# ---------------------------------------------------------------- the cases

def case_attr_deleted(c=None):
    class C:
        pass
    o = C()
    o.flag = 1
    o.scale = 2.0

    def f(x, o):
        if hasattr(o, "flag"):
            return x * o.scale
        return x - 1
    c = _Case(f)
    c.call(X, o)
    c.call(X, o)
    del o.flag
    c.call(X, o)
    del o.scale
    o.flag = 1
    c.call(X, o)
    return c


def _raising_case(exc, via):
    class C:
        scale = 2.0
    o = C()

    def f(x, o):
        return x * o.scale
    c = _Case(f)
    c.call(X, o)
    if via == "property":
        def bad(self):
            raise exc("hostile property")
        C.scale = property(bad)
    else:  # a class-level __getattr__ behind a missing attribute
        del C.scale

        def bad(self, name):
            raise exc("hostile __getattr__")
        C.__getattr__ = bad
    c.call(X, o)
    c.call(X, o)
    return c


def case_property_raises_attributeerror():
    return _raising_case(AttributeError, "property")


def case_property_raises_runtimeerror():
    return _raising_case(RuntimeError, "property")


def case_property_raises_recursionerror():
    return _raising_case(RecursionError, "property")


def case_getattr_raises_attributeerror():
    return _raising_case(AttributeError, "getattr")


def case_getattr_raises_runtimeerror():
    return _raising_case(RuntimeError, "getattr")


def case_hasattr_getattr_raises():
    """hasattr() through a class __getattr__ that starts raising."""
    class C:
        def __getattr__(self, name):
            if name == "flag":
                return 1
            raise AttributeError(name)
    o = C()

    def f(x, o):
        return x + 1 if hasattr(o, "flag") else x - 1
    c = _Case(f)
    c.call(X, o)
    for exc in (AttributeError, RuntimeError, RecursionError):
        def bad(self, name, exc=exc):
            raise exc("hostile")
        C.__getattr__ = bad
        c.call(X, o)
    return c


def case_getattribute_overridden():
    class C:
        scale = 2.0
    o = C()

    def f(x, o):
        return x * o.scale
    c = _Case(f)
    c.call(X, o)
    C.__getattribute__ = lambda self, n: 3.0 if n == "scale" else object.__getattribute__(self, n)
    c.call(X, o)

    def bad(self, n):
        raise RuntimeError("hostile __getattribute__")
    C.__getattribute__ = bad
    c.call(X, o)
    return c


def _module_case():
    """A fresh nn.Module class (each case mutates its own), an instance, and a
    _Case over `m(x)` already called once (compiled)."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.k = 2

        def forward(self, x):
            return self.lin(x) * self.k
    torch.manual_seed(0)
    m = M()

    def f(x, m):
        return m(x)
    c = _Case(f)
    c.call(X, m)
    return M, m, c


def case_module_getattribute_overridden():
    """nn.Module reads (guardjit's native Module.__getattr__) with the class's
    __getattribute__ / __getattr__ replaced after the compile."""
    M, m, c = _module_case()
    M.__getattr__ = lambda self, n: (_ for _ in ()).throw(RuntimeError("hostile"))
    c.call(X, m)
    del M.__getattr__
    M.__getattribute__ = lambda self, n: 5 if n == "k" else torch.nn.Module.__getattribute__(self, n)
    c.call(X, m)
    return c


def case_class_reassigned():
    class A:
        scale = 2.0

    class B:
        scale = 3.0

    class D(A):
        scale = 4.0
    o = A()

    def f(x, o):
        return x * o.scale
    c = _Case(f)
    c.call(X, o)
    o.__class__ = B
    c.call(X, o)
    o.__class__ = D
    c.call(X, o)
    o.__class__ = A
    c.call(X, o)
    return c


def case_module_dict_evil_entries():
    """A Python module's __dict__ gets keys whose __eq__/__hash__ raise
    (guardjit reads module attributes natively through md_dict)."""
    mod = types.ModuleType("hostile_mod")
    mod.CONST = 2.0
    sys.modules["hostile_mod"] = mod
    g = {"torch": torch, "hostile_mod": mod}
    exec("def f(x):\n    return x * hostile_mod.CONST\n", g)
    c = _Case(g["f"])
    c.call(X)
    evil = EvilEq("CONST")
    _disarmed(lambda: mod.__dict__.__setitem__(evil, 7))  # collides with CONST, found after it
    c.call(X)

    def reinsert():  # now the evil key is probed first
        del mod.CONST
        mod.CONST = 2.0
    _disarmed(reinsert)
    c.call(X)
    _disarmed(mod.__dict__.clear)
    EvilEq.armed = False
    mod.CONST = 2.0
    c.call(X)
    mod.OTHER = EvilHash()  # a value whose __hash__/__eq__ raise
    c.call(X)
    mod.CONST = EvilHash()  # the guarded value itself
    c.call(X)
    return c


def case_nn_module_dict_evil_entries():
    """nn.Module's __dict__ / _buffers get keys whose __eq__ raises and a value
    whose __eq__/__hash__ raise (guardjit emulates Module.__getattr__)."""
    _, m, c = _module_case()
    _disarmed(lambda: m._buffers.__setitem__(EvilEq("lin"), None))  # `"lin" in _buffers` raises
    c.call(X, m)
    EvilEq.armed = False
    m._buffers.clear()
    c.call(X, m)
    m.__dict__["k"] = EvilHash()          # an unhashable, uncomparable attribute
    c.call(X, m)
    m.__dict__["k"] = 2
    _disarmed(lambda: m.__dict__.__setitem__(EvilEq("k"), 0))  # the instance dict is no longer str-keyed
    c.call(X, m)
    return c


def case_dict_key_eq_raises():
    def f(x, d):
        return x * d["a"]
    c = _Case(f)
    c.call(X, {"a": 2.0, "b": 1})
    c.call(X, _dict(("a", 2.0), (EvilEq("a"), 1)))     # "a" found first: no __eq__ call
    c.call(X, _dict((EvilEq("a"), 1), ("a", 2.0)))     # the evil key is probed first
    c.call(X, _dict((EvilEq("a", AttributeError), 1), ("a", 2.0)))
    c.call(X, {"a": 2.0, "b": 1})
    return c


def case_dict_key_eq_raises_ordered():
    """Dynamo guards dict keys by position when the function iterates them."""
    def f(x, d):
        for k, v in d.items():
            x = x + v
        return x
    c = _Case(f)
    c.call(X, {"a": 1.0, "b": 2.0})
    c.call(X, _dict((EvilEq("a"), 1.0), ("b", 2.0)))
    c.call(X, {"a": 1.0, "b": 2.0})
    return c


_G = {"torch": torch}


def case_freed_address_reused():
    """A global object is freed and a new one of the same class is allocated at
    the same address with a different attribute."""
    class C:
        __slots__ = ("scale",)
    g = _G
    g["C"] = C
    g["obj"] = C()
    g["obj"].scale = 2.0
    exec("def f(x):\n    return x * obj.scale\n", g)
    c = _Case(g["f"])
    c.call(X)
    old = id(g["obj"])
    del g["obj"]
    found = None
    keep = []
    for _ in range(200000):
        o = C()
        if id(o) == old:
            found = o
            break
        keep.append(o)
    if found is None:  # PYTHONMALLOC=debug may never hand the address out again
        found = C()
    c.reused = id(found) == old
    found.scale = 5.0
    g["obj"] = found
    del keep
    c.call(X)
    return c


def case_freed_type_reused():
    """The guarded object's class dies and a new class (same size) is created
    at the same address; Dynamo's TYPE_MATCH compares addresses."""
    import gc
    g = {"torch": torch}

    def make(scale):
        return type("C", (), {"scale": scale})
    C = make(2.0)
    g["obj"] = C()
    exec("def f(x):\n    return x * obj.scale\n", g)
    c = _Case(g["f"])
    c.call(X)
    old = id(C)
    del C
    g["obj"] = None
    c.call(X)
    gc.collect()
    found = None
    keep = []
    for _ in range(20000):
        T = make(9.0)
        if id(T) == old:
            found = T
            break
        keep.append(T)
    c.reused = found is not None
    g["obj"] = (found or make(9.0))()
    c.call(X)
    del keep
    return c


def case_tensor_dynamic_indices():
    def f(x):
        return x * 2
    c = _Case(f)
    x = torch.arange(4.0)
    c.call(x)
    for v in ("abc", {0: 1}, [0], 3, None, object(), frozenset({0}), {10 ** 30}, {-1}):
        x._dynamo_dynamic_indices = v
        c.call(x)
    x._dynamo_dynamic_indices = set()
    c.call(x)
    return c


def case_tensor_attr_set():
    """Other Dynamo marker attributes and arbitrary attributes on the tensor."""
    def f(x):
        return x + 1
    c = _Case(f)
    x = torch.arange(4.0)
    c.call(x)
    x._dynamo_static_input_type = "weird"
    c.call(x)
    x._dynamo_weak_dynamic_indices = object()
    c.call(x)
    x.__dict__["_dynamo_unbacked_indices"] = 1.5
    c.call(x)
    return c


CASES = {name[len("case_"):]: fn for name, fn in list(globals().items())
         if name.startswith("case_")}


def run(name):
    torch._dynamo.reset()
    counters.clear()
    EvilEq.armed = False
    gj = os.environ.get("GUARDJIT") == "1"
    if gj:
        from guardjit import plugin
        plugin.config.keep_units = True
        plugin.clear_units()
    c = CASES[name]()
    out = {"case": name, "steps": c.steps, "reused": c.reused}
    if gj:
        import guardjit
        from guardjit import _core
        st = guardjit.stats()
        out["guardjit"] = {k: st.get(k) for k in ("units_seen", "units_native",
                                                   "units_interpreter", "units_dynamo")}
        # guardjit's checks of this case's units: (calls, failures), summed
        counts = [_core.guard_counters(u.check)[:2] for u in plugin.units() if u.check is not None]
        out["guardjit"]["check_calls"] = sum(n for n, _ in counts)
        out["guardjit"]["check_failures"] = sum(f for _, f in counts)
        plugin.clear_units()
    return out


if __name__ == "__main__":
    names = sys.argv[1:] or list(CASES)
    for n in names:
        print("HOSTILE " + json.dumps(run(n)), flush=True)
