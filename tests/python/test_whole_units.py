"""Compile units that used to stay on Dynamo's path, one test per cause.

* A tensor subclass with ``__torch_function__``, or a ``TorchFunctionMode``:
  Dynamo adds a second TORCH_FUNCTION_STATE guard, and torch 2.13's
  RootGuardManager keeps both ``add_torch_function_mode_stack_guard`` calls
  (it de-duplicates no root guard), so its tree holds two
  TORCH_FUNCTION_MODE_STACK leaves; the recorder used to drop the second as
  a duplicate and the counts disagreed (35 of 235 units of torch's
  test_subclasses.py with GUARDJIT=1).
* Guards below an empty DictGuardManager (an empty OrderedDict that is
  iterated): Dynamo's DictGuardManager returns after its type and size
  checks when the dict is empty, so what hangs below is in the tree but never
  checked; the recorder refused it (2 of 922 units of test_misc.py).

Each test asserts that the unit is converted (``units_dynamo`` stays 0) and
that guardjit answers as Dynamo's own tree on mutated inputs; the
``*_plain_torch`` tests compare call results and graph counts with a process
running plain torch.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap

import torch
from torch.overrides import TorchFunctionMode

import guardjit
from guardjit import plugin, recorder
from torch._C._dynamo import guards as C


def _agree(u, f_locals) -> bool:
    expected = u.dynamo_root.check(f_locals)
    got = (u.native_root.check(f_locals), u.check(f_locals), u.bound.interpret(f_locals))
    assert got == (expected,) * 3, f"dynamo={expected}, (root, native, interpreter)={got}"
    return expected


def _converted_unit(before: int):
    assert guardjit.stats()["units_dynamo"] == before, guardjit.stats()["fallback_reasons"]
    units = plugin.units()
    assert units and all(u.status == "native" for u in units), [u.reason for u in units]
    return units[-1]


def _run_both(script: str) -> tuple[dict, dict]:
    out = []
    for gj in ("1", None):
        env = {k: v for k, v in os.environ.items() if k != "GUARDJIT"}
        if gj:
            env["GUARDJIT"] = gj
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                           capture_output=True, text=True, timeout=600, cwd="/")
        assert r.returncode == 0, r.stderr[-3000:]
        out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return out[0], out[1]


_STATS = """
import torch._dynamo.utils as _u
gj = {}
try:
    import guardjit
    _s = guardjit.stats()
    gj = {k: _s[k] for k in ("units_seen", "units_dynamo")} if _s.get("units_seen") else {}
except ImportError:
    pass
"""


def test_root_guards_are_not_deduplicated_by_torch():
    # What the recorder relies on: every call adds a leaf.
    r = C.RootGuardManager()
    r.add_torch_function_mode_stack_guard([], ["a"], None)
    r.add_torch_function_mode_stack_guard([], ["b"], None)
    r.add_default_device_guard(["a"], None)
    r.add_default_device_guard(["b"], None)
    g = C.GlobalStateGuard()
    r.add_global_state_guard(g, ["a"], None)
    r.add_global_state_guard(g, ["b"], None)
    assert len(r.get_leaf_guards()) == 6


# --- TORCH_FUNCTION_MODE_STACK twice -------------------------------------------------

class ScaledTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


class OtherTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


class PassMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class OtherMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _affine(x):
    return x * 2 + 1


def test_tensor_subclass_with_torch_function_is_converted_and_agrees():
    before = guardjit.stats()["units_dynamo"]
    x = torch.randn(3).as_subclass(ScaledTensor)
    guardjit.compile(_affine, backend="eager")(x)
    u = _converted_unit(before)
    # As Dynamo's tree: two in a fresh process (the dedup pass merges the two
    # checks afterwards). An earlier check that raised out of Dynamo's tree
    # (test_torch213_kinds' DispatchKeySet cast) leaves torch's state such
    # that Dynamo adds one: the subprocess test below sees a fresh process.
    tree = recorder.count_tree_guards(u.dynamo_root)["TORCH_FUNCTION_MODE_STACK"]
    assert u.recorded_ir.count_by_kind()["TORCH_FUNCTION_MODE_STACK"] == tree >= 1
    answers = [_agree(u, {"x": x}),
               _agree(u, {"x": torch.randn(3).as_subclass(ScaledTensor)}),
               _agree(u, {"x": torch.randn(3)}),
               _agree(u, {"x": torch.randn(3).as_subclass(OtherTensor)})]
    with PassMode():
        answers.append(_agree(u, {"x": x}))
    answers.append(_agree(u, {"x": x}))
    assert answers == [True, True, False, False, False, True]


def test_torch_function_mode_is_converted_and_agrees():
    before = guardjit.stats()["units_dynamo"]
    x = torch.randn(3)
    compiled = guardjit.compile(_affine, backend="eager")
    with PassMode():
        compiled(x)
    u = _converted_unit(before)
    fl = {"x": x}
    answers = [_agree(u, fl)]
    with PassMode():
        answers.append(_agree(u, fl))
        with PassMode():
            answers.append(_agree(u, fl))
    with OtherMode():
        answers.append(_agree(u, fl))
    with PassMode():
        answers.append(_agree(u, fl))
    assert answers == [False, True, False, False, True]


MODES_SCRIPT = """
import json, torch
try:
    from guardjit import plugin as _p
    _p.config.keep_units = True
except ImportError:
    pass
from torch.overrides import TorchFunctionMode
class Sub(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})
class AddOne(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out + 1 if func is torch.Tensor.mul else out
def f(x): return x * 2 + 1
cf = torch.compile(f, backend="eager")
g = torch.Generator().manual_seed(0)
x = torch.randn(3, generator=g)
outs = [cf(x.as_subclass(Sub)).tolist(), cf(x).tolist()]
with AddOne():
    outs.append(cf(x).tolist())
outs.append(cf(x.as_subclass(Sub)).tolist())
""" + _STATS + """
try:
    from guardjit import plugin, recorder
    gj["modestack"] = [recorder.count_tree_guards(u.dynamo_root).get("TORCH_FUNCTION_MODE_STACK")
                       for u in plugin.units()]
except ImportError:
    pass
print(json.dumps({"outs": outs, "graphs": _u.counters["stats"]["unique_graphs"], "gj": gj}))
"""


def test_subclass_and_mode_calls_match_plain_torch():
    with_gj, plain = _run_both(MODES_SCRIPT)
    assert with_gj["gj"]["units_dynamo"] == 0 and with_gj["gj"]["units_seen"] >= 2
    assert 2 in with_gj["gj"]["modestack"]  # the cause is exercised
    assert with_gj["outs"] == plain["outs"]
    assert with_gj["graphs"] == plain["graphs"]


# --- guards below an empty DictGuardManager -------------------------------------------

def _iterate(x, d):
    for k in d:
        x = x + d[k]
    return x * len(d)


def test_empty_dict_guard_manager_is_converted_and_agrees():
    before = guardjit.stats()["units_dynamo"]
    d = collections.OrderedDict()
    x = torch.randn(3)
    guardjit.compile(_iterate, backend="eager")(x, d)
    u = _converted_unit(before)
    # Dynamo's tree has a DICT_CONTAINS below the empty dict (is __iter__ an
    # instance attribute?) that it never checks; the IR leaves it out.
    assert "dict_contains" not in u.ir.print()
    answers = [_agree(u, {"x": x, "d": d}),
               _agree(u, {"x": x, "d": collections.OrderedDict()}),
               _agree(u, {"x": x, "d": collections.OrderedDict(a=torch.ones(3))}),
               _agree(u, {"x": x, "d": {}})]
    d.__iter__ = lambda: iter(["a"])  # the unchecked guard's condition flips
    answers.append(_agree(u, {"x": x, "d": d}))
    assert answers == [True, True, False, False, True]


EMPTY_DICT_SCRIPT = """
import collections, json, torch
def f(x, d):
    for k in d: x = x + d[k]
    return x * (len(d) + 1)
cf = torch.compile(f, backend="eager")
x = torch.ones(3)
outs = [cf(x, collections.OrderedDict()).tolist(),
        cf(x, collections.OrderedDict(a=torch.ones(3))).tolist(),
        cf(x, collections.OrderedDict()).tolist()]
""" + _STATS + """
print(json.dumps({"outs": outs, "graphs": _u.counters["stats"]["unique_graphs"], "gj": gj}))
"""


def test_empty_dict_calls_match_plain_torch():
    with_gj, plain = _run_both(EMPTY_DICT_SCRIPT)
    assert with_gj["gj"]["units_dynamo"] == 0 and with_gj["gj"]["units_seen"] >= 2
    assert with_gj["outs"] == plain["outs"]
    assert with_gj["graphs"] == plain["graphs"]
