"""Adversarial scenarios for ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``
with guardjit owning the differentiating roots (stance.py, DiffSet.cpp).

Units that differ only in something the diffset pass might take as "the
same": guard-less reads (hasattr), closures of one code, ``1``/``True``/
``1.0``, ``-0.0``/``0.0``, NaN, str subclasses, tuples/lists, equal dict keys,
tensor subclasses and Parameters, strides, shape relations, global state,
module attributes, guard filters beside full units, the recompile limit,
graph breaks, entries invalidated by a dead object and new ones at reused
addresses, ``torch._dynamo.reset()`` between phases.

Every scenario runs with plain torch in one subprocess (``GUARDJIT`` unset:
``python test_stance_adversarial.py`` prints every scenario's calls as JSON),
in-process with ``guardjit.install()`` under each policy (with the oracle of
stance_scenarios.py: the entry a full lookup picks in the cache order of that
call), and in one more subprocess with ``GUARDJIT=1`` (the autoload path),
``GUARDJIT_MODE=interpreter``. Each call is compared with eager, with plain
torch and with the full lookup.

This module must not import guardjit at the top: the plain-torch subprocess
runs it as a script.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import json
import math
import os
import subprocess
import sys
from typing import Any, Callable

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stance_scenarios as S  # noqa: E402
from stance_scenarios import Run, Target  # noqa: E402


@dataclasses.dataclass
class Adv:
    fn: Callable[[Run], None]
    # A guard filter drops guards the full lookup would need: an entry may
    # serve inputs it was not compiled for (its output is then not eager's).
    unsafe_filters: bool = False
    # Graph breaks: the oracle sees only the first code object; outputs are
    # compared with eager and plain torch, not the graph that ran.
    outputs_only: bool = False
    # Dynamo's full guards themselves serve a graph whose result is not
    # eager's (plain torch, outside the stance too): compare with plain torch.
    full_lookup_wrong: bool = False


ADV: dict[str, Adv] = {}


def adv(unsafe_filters: bool = False, outputs_only: bool = False,
        full_lookup_wrong: bool = False):
    def register(fn):
        ADV[fn.__name__] = Adv(fn, unsafe_filters, outputs_only, full_lookup_wrong)
        return fn
    return register


def _t(run: Run, fn: Callable, **kw: Any) -> Target:
    return Target(torch.compile(fn, backend=run.backend, **kw), fn, fn)


# --- guard-less reads ------------------------------------------------------

class _Obj:
    pass


def _hasattr_fn(x, o):
    if hasattr(o, "a"):
        return x + 1
    return x - 1


def _keep_hasattr_and_type(entries):
    return [e.guard_type == "HASATTR" or (e.guard_type == "TYPE_MATCH" and e.name == "o")
            for e in entries]


@adv()
def hasattr_read_only_difference(run: Run) -> None:
    """The only check telling unit A (o has 'a': a guard-less getattr read,
    Dynamo's HASATTR) from unit B (NO_HASATTR) is that read; the shared
    TYPE_MATCH is all else A has. A's reduced set is then one read and no
    guard, and must not become a root with no guards (which passes B's
    inputs). The filter keeps only guards the full lookup needs here."""
    t = _t(run, _hasattr_fn, options={"guard_filter_fn": _keep_hasattr_and_type})
    x = torch.zeros(2)
    o1, o2 = _Obj(), _Obj()
    o1.a = 5
    inputs = [("has a", (x, o1), {}), ("no a", (x, o2), {})]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs)


@adv()
def hasattr_none_missing_value(run: Run) -> None:
    """Attribute set to None, set to 1, and missing (no filter)."""
    def fn(x, o):
        if hasattr(o, "a"):
            if o.a is None:
                return x + 10
            return x + o.a
        return x - 1

    t = _t(run, fn)
    x = torch.zeros(2)
    on, o1, om = _Obj(), _Obj(), _Obj()
    on.a, o1.a = None, 1
    inputs = [("a=None", (x, on), {}), ("a=1", (x, o1), {}), ("no a", (x, om), {})]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs)


# --- callables ---------------------------------------------------------------

def _apply_fn(x, f):
    return f(x)


def _make_adder(k):
    return lambda x: x + k


def _g1(x):
    return x * 2


def _g2(x):
    return x * 3


@adv()
def closures_of_one_code(run: Run) -> None:
    """Two closures of the same code object (one lambda, different cell
    contents) and two plain functions with equal bodies but different codes."""
    t = _t(run, _apply_fn)
    x = torch.ones(2)
    a2, a3 = _make_adder(2), _make_adder(3)
    inputs = [("adder 2", (x, a2), {}), ("adder 3", (x, a3), {}), ("g1", (x, _g1), {}),
              ("g2", (x, _g2), {})]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs[:3])
        for label, args, kw in inputs * 2:
            run.call(label, t, *args, **kw)


@adv()
def partials(run: Run) -> None:
    """functools.partial objects of one function with different bound
    arguments (equal reprs apart from the argument)."""
    def mul(x, k):
        return x * k

    t = _t(run, _apply_fn)
    x = torch.ones(2)
    inputs = [("partial k=2", (x, functools.partial(mul, k=2)), {}),
              ("partial k=5", (x, functools.partial(mul, k=5)), {})]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs)


# --- constants ------------------------------------------------------------------

def _const_fn(x, v):
    if type(v) is bool:
        return x + 100
    if type(v) is float:
        return x * v + 0.5
    return x * v


@adv()
def int_bool_float_equal_constants(run: Run) -> None:
    """1, True and 1.0: equal (and equally hashed) constants of three types."""
    t = _t(run, _const_fn)
    x = torch.ones(2)
    inputs = [("1", (x, 1), {}), ("True", (x, True), {}), ("1.0", (x, 1.0), {})]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs)


def _sign_fn(x, v):
    return x * math.copysign(1.0, v) + (1.0 if v != v else 0.0)


@adv(full_lookup_wrong=True)
def signed_zero_and_nan(run: Run) -> None:
    """0.0, -0.0 (equal under ==) and NaN (equal to nothing). Dynamo's
    EQUALS_MATCH(0.0) passes -0.0, so plain torch serves -0.0 with the 0.0
    graph even outside the stance (copysign is then wrong); guardjit must
    do exactly the same, no worse."""
    t = _t(run, _sign_fn)
    x = torch.ones(2)
    inputs = [("0.0", (x, 0.0), {}), ("-0.0", (x, -0.0), {}), ("nan", (x, float("nan")), {})]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs)


class _Str(str):
    pass


def _str_fn(x, s):
    if type(s) is str:
        return x + len(s)
    return x - len(s)


@adv()
def str_subclass_equal_value(run: Run) -> None:
    """"ab" and a str subclass equal to "ab" (same repr and hash)."""
    t = _t(run, _str_fn)
    x = torch.ones(2)
    inputs = [("str", (x, "ab"), {}), ("subclass", (x, _Str("ab")), {})]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs)


def _seq_fn(x, s):
    r = x * s[0] + s[1]
    if isinstance(s, list):
        r = r + 100
    return r


@adv()
def tuples_and_lists(run: Run) -> None:
    """(1, 2), [1, 2] and (1, 3)."""
    t = _t(run, _seq_fn)
    x = torch.ones(2)
    inputs = [("(1, 2)", (x, (1, 2)), {}), ("[1, 2]", (x, [1, 2]), {}),
              ("(1, 3)", (x, (1, 3)), {})]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs)


def _dict_key_fn(x, d):
    r = x
    for k, v in d.items():
        r = r + v * (10 if type(k) is bool else 1)
    return r


@adv()
def equal_dict_keys(run: Run) -> None:
    """Dict keys equal but not identical or of another type: 1 and True,
    a literal str key and an equal str built at run time."""
    t = _t(run, _dict_key_fn)
    x = torch.ones(2)
    built = "".join(["k", "ey"])
    inputs = [("{1: 2}", (x, {1: 2}), {}), ("{True: 2}", (x, {True: 2}), {}),
              ("{'key': 3}", (x, {"key": 3}), {}), ("{built 'key': 3}", (x, {built: 3}), {})]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs[:3])
        for label, args, kw in inputs * 2:
            run.call(label, t, *args, **kw)


# --- tensors -----------------------------------------------------------------

class _SubTensor(torch.Tensor):
    pass


def _tensor_fn(x):
    return x * 2


@adv()
def tensor_subclass_parameter_plain(run: Run) -> None:
    """One shape and dtype as a plain tensor, a Parameter (requires_grad
    off, so only the pytype differs) and a tensor subclass."""
    t = _t(run, _tensor_fn)
    base = torch.ones(3)
    p = torch.nn.Parameter(torch.ones(3), requires_grad=False)
    sub = torch.ones(3).as_subclass(_SubTensor)
    inputs = [("tensor", (base,), {}), ("parameter", (p,), {}), ("subclass", (sub,), {})]
    with torch.no_grad():
        for label, args, kw in inputs:
            run.call(label, t, *args, **kw)
        with run.stance():
            run.all_orders(t, inputs)


def _matmul_fn(x):
    return x @ torch.arange(3.0) + x[0, 1]


@adv()
def strides_static(run: Run) -> None:
    """A square matrix and its transpose (same sizes, strides differ)."""
    t = _t(run, _matmul_fn, dynamic=False)
    a = torch.arange(9.0).reshape(3, 3)
    inputs = [("contiguous", (a,), {}), ("transposed", (a.t(),), {})]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs)


def _cat_fn(x, y):
    if x.size(0) == y.size(0):
        return torch.cat([x, y]) * 2
    return torch.cat([x, y])


@adv()
def dynamic_shape_relations(run: Run) -> None:
    """dynamic=True: an entry for equal sizes (a shape relation guard), one
    for different sizes, and a transposed square input."""
    t = _t(run, _cat_fn, dynamic=True)
    inputs = [("3 == 3", (torch.ones(3), torch.ones(3)), {}),
              ("3 != 4", (torch.ones(3), torch.ones(4)), {}),
              ("5 == 5", (torch.ones(5), torch.ones(5)), {})]
    for label, args, kw in inputs[:2]:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs)


def _square_fn(x):
    return x.sum(0) * 2 + x[0]


@adv()
def dynamic_strides(run: Run) -> None:
    t = _t(run, _square_fn, dynamic=True)
    a = torch.arange(16.0).reshape(4, 4)
    b = torch.arange(25.0).reshape(5, 5)
    inputs = [("4x4", (a,), {}), ("4x4 transposed", (a.t(),), {}), ("5x5", (b,), {}),
              ("5x5 transposed", (b.t(),), {})]
    for label, args, kw in inputs[:2]:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs[:3])
        for label, args, kw in inputs * 2:
            run.call(label, t, *args, **kw)


def _cat2_fn(x, y):
    return torch.cat([x, y]) * 2


@adv()
def mark_dynamic_two_inputs(run: Run) -> None:
    """mark_dynamic on one of two inputs, then on the other."""
    t = _t(run, _cat2_fn)
    a, b = torch.ones(4), torch.ones(4)
    torch._dynamo.mark_dynamic(a, 0)
    c, d = torch.ones(6), torch.ones(6)
    torch._dynamo.mark_dynamic(d, 0)
    inputs = [("a dyn", (a, b), {}), ("d dyn", (c, d), {})]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs)


# --- global state ------------------------------------------------------------

@contextlib.contextmanager
def _deterministic():
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old)


def _autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def _mm_fn(x):
    return (x @ x).sum() + torch.ones(1, dtype=torch.get_default_dtype())


@adv()
def global_state(run: Run) -> None:
    """Units that differ only in deterministic mode, CPU autocast, or
    no_grad; all in one code object."""
    t = _t(run, _mm_fn)
    x = torch.eye(2, requires_grad=True)
    inputs = [("plain", (x,), {}), ("deterministic", (x,), {}, _deterministic),
              ("autocast", (x,), {}, _autocast), ("no_grad", (x,), {}, torch.no_grad)]
    for label, args, kw, *ctx in inputs:
        run.call(label, t, *args, ctx=ctx[0] if ctx else contextlib.nullcontext, **kw)
    with run.stance():
        run.all_orders(t, inputs[:3])
        for label, args, kw, *ctx in inputs * 2:
            run.call(label, t, *args, ctx=ctx[0] if ctx else contextlib.nullcontext, **kw)


# --- modules -------------------------------------------------------------------

class _Gated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.bias = None

    def forward(self, x):
        y = self.lin(x)
        if self.bias is not None:
            y = y + self.bias
        if getattr(self, "extra", None) is not None:
            y = y * self.extra
        return y


@adv()
def module_attribute_mutation(run: Run) -> None:
    """A module attribute None / a tensor, and an attribute added then
    deleted (hasattr through getattr's default)."""
    torch.manual_seed(0)
    m = _Gated()
    t = Target(torch.compile(m, backend=run.backend), m, _Gated.forward, m)
    x = torch.ones(1, 2)
    bias = torch.full((2,), 0.5)

    def with_bias():
        return S._attribute(m, "bias", bias)

    @contextlib.contextmanager
    def with_extra():
        m.extra = 3.0
        try:
            yield
        finally:
            del m.extra

    inputs = [("plain", (x,), {}), ("bias", (x,), {}, with_bias), ("extra", (x,), {}, with_extra)]
    with torch.no_grad():
        for label, args, kw, *ctx in inputs:
            run.call(label, t, *args, ctx=ctx[0], **kw) if ctx else run.call(label, t, *args, **kw)
        with run.stance():
            run.all_orders(t, inputs)


@adv(unsafe_filters=True)
def nn_module_filter_beside_full(run: Run) -> None:
    """Units of one forward: full guards (train), and
    skip_guard_on_all_nn_modules_unsafe (eval), on one module."""
    m = S.TrainEval()
    full = Target(torch.compile(m, backend=run.backend), m, S.TrainEval.forward, m)
    filt = Target(torch.compile(m, backend=run.backend, options={
        "guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}),
        m, S.TrainEval.forward, m)
    x = torch.ones(2)
    run.call("train (full)", full, x)
    m.eval()
    run.call("eval (filtered)", filt, x)
    with run.stance():
        for mode in ("train", "eval", "train", "eval", "eval", "train"):
            m.train(mode == "train")
            run.call(mode, full, x)
            run.call(mode, filt, x)
    m.train()


def _pow_fn(x, n):
    return x * n


@adv()
def past_the_recompile_limit(run: Run) -> None:
    """Ten static int values: eight entries (recompile_limit), then eager."""
    t = _t(run, _pow_fn, dynamic=False)
    x = torch.ones(2)
    for n in range(10):
        run.call(f"n={n}", t, x, n)
    with run.stance():
        for n in (7, 0, 3, 7, 5, 1, 0, 6, 2, 4, 7):
            run.call(f"n={n}", t, x, n)


def _break_fn(x, a, b):
    x = x * 2
    if a:
        x = x + 1
    torch._dynamo.graph_break()
    if b:
        x = x * 5
    return x


@adv(outputs_only=True)
def graph_break_codes(run: Run) -> None:
    """A graph break: the resume function has entries of its own."""
    t = _t(run, _break_fn)
    x = torch.ones(2)
    combos = [(False, False), (True, False), (False, True), (True, True)]
    inputs = [(f"a={a},b={b}", (x, a, b), {}) for a, b in combos]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs[:3])
        for label, args, kw in inputs * 2:
            run.call(label, t, *args, **kw)


_FNS_SRC = "def f(x):\n    return x * {k}\n"


def _fresh_fn(k: int) -> Callable:
    ns: dict = {}
    exec(_FNS_SRC.format(k=k), ns)
    return ns["f"]


@adv()
def invalidated_and_reused_address(run: Run) -> None:
    """Functions ID_MATCHed as locals: one dies (its entry is invalidated),
    new functions are created (possibly at its address) and compiled."""
    t = _t(run, _apply_fn)
    x = torch.ones(2)
    f2, f3 = _fresh_fn(2), _fresh_fn(3)
    run.call("f2", t, x, f2)
    run.call("f3", t, x, f3)
    with run.stance():
        run.all_orders(t, [("f2", (x, f2), {}), ("f3", (x, f3), {})])
    del f2
    gc.collect()
    news = [_fresh_fn(k) for k in (4, 5)]
    for f, k in zip(news, (4, 5)):
        run.call(f"f{k}", t, x, f)
    with run.stance():
        run.all_orders(t, [("f3", (x, f3), {}), ("f4", (x, news[0]), {}),
                           ("f5", (x, news[1]), {})])


@adv()
def reset_between_phases(run: Run) -> None:
    """torch._dynamo.reset() between two warm-ups and stances."""
    t = _t(run, S._cache_line_fn)
    x = torch.ones(2)
    first = [("a=None", (x,), {"a": None}), ("a=1", (x,), {"a": 1})]
    for label, args, kw in first:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, first)
    torch._dynamo.reset()
    t = _t(run, S._cache_line_fn)
    second = [("b=1", (x,), {"b": 1}), ("a=1,b=1", (x,), {"a": 1, "b": 1}),
              ("float64", (x.double(),), {})]
    for label, args, kw in second:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, second)


# --- partial activation, free tensors, modules as arguments ------------------

# guardjit.compile in test_partial_activation; torch.compile elsewhere (plain
# torch, and under guardjit.install(), where every unit is converted anyway).
_PARTIAL_COMPILE: list = [torch.compile]


@adv()
def partial_activation(run: Run) -> None:
    """One code, two wrappers sharing its cache (one backend): units compiled
    through guardjit.compile (converted) and through plain torch.compile
    (opaque to guardjit unless it is installed), interleaved."""
    fn = S._cache_line_fn
    gj = Target(_PARTIAL_COMPILE[0](fn, backend=run.backend), fn, fn)
    plain = Target(torch.compile(fn, backend=run.backend), fn, fn)
    x = torch.ones(2)
    inputs = [("a=None (plain)", (x,), {"a": None}), ("a=1 (guardjit)", (x,), {"a": 1}),
              ("b=1 (plain)", (x,), {"b": 1}), ("a=1,b=1 (guardjit)", (x,), {"a": 1, "b": 1})]
    for (label, args, kw), t in zip(inputs, (plain, gj, plain, gj)):
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(plain, inputs[:3])
        for label, args, kw in inputs * 2:
            run.call(label, gj, *args, **kw)
            run.call(label, plain, *args, **kw)


_FREE = torch.ones(2)


def _free_fn(x):
    return x + _FREE


@adv()
def install_free_tensors(run: Run) -> None:
    """install_free_tensors=True: a global tensor is a graph input with a
    TENSOR_MATCH of its own; rebound to another dtype and back."""
    global _FREE
    saved = _FREE
    x = torch.ones(2)
    f32, f64 = torch.ones(2), torch.ones(2, dtype=torch.float64) * 2
    try:
        with torch._dynamo.config.patch(install_free_tensors=True):
            t = _t(run, _free_fn)
            for label, value in (("float32", f32), ("float64", f64)):
                _FREE = value
                run.call(label, t, x)
            with run.stance():
                for label, value in (("float32", f32), ("float64", f64), ("float64", f64),
                                     ("float32", f32), ("float32", f32), ("float64", f64)):
                    _FREE = value
                    run.call(label, t, x)
    finally:
        _FREE = saved


def _module_arg_fn(x, m):
    return m(x)


@adv()
def modules_as_arguments_and_deleted(run: Run) -> None:
    """nn.Modules passed as arguments (two of one class, different weights,
    one of another class); one dies, a new one is compiled."""
    torch.manual_seed(0)
    t = _t(run, _module_arg_fn)
    x = torch.ones(1, 2)
    ms = {"lin a": torch.nn.Linear(2, 2), "lin b": torch.nn.Linear(2, 2),
          "tanh": torch.nn.Tanh()}
    with torch.no_grad():
        for label, m in ms.items():
            run.call(label, t, x, m)
        with run.stance():
            run.all_orders(t, [(label, (x, m), {}) for label, m in ms.items()])
        del ms["lin a"]
        gc.collect()
        ms["lin c"] = torch.nn.Linear(2, 2)
        run.call("lin c", t, x, ms["lin c"])
        with run.stance():
            run.all_orders(t, [(label, (x, m), {}) for label, m in ms.items()])


_SENT1, _SENT2 = object(), object()  # neither weakly referenceable nor immortal


def _sentinel_fn(x, s):
    if s is _SENT1:
        return x + 1
    if s is _SENT2:
        return x + 2
    return x + 3


@adv(full_lookup_wrong=True)
def sentinels_not_weakrefable(run: Run) -> None:
    """object() sentinels compared with ``is``, beside a None argument.
    Plain torch 2.13 serves _SENT2 with the graph compiled for _SENT1 even
    outside the stance (its guards do not tell two bare object()s apart):
    guardjit must answer exactly as plain torch, in every cache order."""
    t = _t(run, _sentinel_fn)
    x = torch.ones(2)
    inputs = [("sentinel 1", (x, _SENT1), {}), ("sentinel 2", (x, _SENT2), {}),
              ("None", (x, None), {})]
    for label, args, kw in inputs:
        run.call(label, t, *args, **kw)
    with run.stance():
        run.all_orders(t, inputs)


# --- running -----------------------------------------------------------------

def run_adv(name: str, oracle: bool) -> list[dict]:
    torch._dynamo.reset()
    run = Run(oracle)
    try:
        ADV[name].fn(run)
    finally:
        torch._dynamo.reset()
    return run.calls


def _plain_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("GUARDJIT")}


def _subprocess(env: dict, oracle: bool) -> dict:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__)] + (["--oracle"] if oracle else []),
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def torch_calls() -> dict:
    """Every scenario with plain torch (one subprocess)."""
    return _subprocess(_plain_env(), oracle=False)


def _judge(name: str, calls: list[dict], ref: list[dict]) -> None:
    sc = ADV[name]
    assert [c["label"] for c in calls] == [c["label"] for c in ref]
    bad = []
    for i, (g, t) in enumerate(zip(calls, ref)):
        assert g["eager"] == t["eager"], (i, g["label"])  # the same inputs
        if not g["stance"]:
            if g["out"] != t["out"] or g["error"] is not None:
                bad.append((i, "outside the stance", g, t))
            continue
        if sc.outputs_only:
            if g["error"] is not None or g["out"] != g["eager"]:
                if not (t["error"] == g["error"] and t["out"] == g["out"]):
                    bad.append((i, "output", g, t))
            continue
        if g["expect"] == S.NO_ENTRY:
            continue  # never warmed: no promise beyond "no crash"
        if g["error"] is not None or g["ran"] != g["expect"]:
            bad.append((i, "misrouted", g, t))
        elif sc.full_lookup_wrong:
            if g["out"] != t["out"]:
                bad.append((i, "not plain torch's result", g, t))
        elif not sc.unsafe_filters and g["out"] != g["eager"]:
            bad.append((i, "not eager's result", g, t))
    assert not bad, f"{len(bad)} bad calls of {len(calls)}; first: {bad[:2]}"


@pytest.fixture(params=["torch-compatible", "minimal", "guarded-minimal"])
def policy(request):
    import guardjit
    from guardjit import plugin

    saved = plugin.config.diffset_policy
    plugin.config.diffset_policy = request.param
    assert guardjit.install()
    yield request.param
    guardjit.uninstall()
    plugin.config.diffset_policy = saved


@pytest.mark.parametrize("name", sorted(ADV))
def test_adversarial_routes_like_a_full_lookup(name, policy, torch_calls):
    calls = run_adv(name, oracle=True)
    _judge(name, calls, torch_calls[name])


def test_lone_read_is_not_an_empty_root(policy):
    """The regression behind hasattr_read_only_difference: the unit whose
    reduced set is one guard-less read gets a compiled root that rejects the
    other unit's input, not a root with no guards."""
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    from guardjit import stance

    opt = torch.compile(_hasattr_fn, backend="eager",
                        options={"guard_filter_fn": _keep_hasattr_and_type})
    x = torch.zeros(2)
    with_a, without = _Obj(), _Obj()
    with_a.a = 1
    opt(x, with_a)
    opt(x, without)
    kinds = {}
    for e in _debug_get_cache_entry_list(_hasattr_fn.__code__):
        st = stance.state(e.guard_manager)
        kinds[str(e.compile_id)] = (st.kind, st.guards_out)
        if st.kind == "reduced" and st.guards_out == 0:
            frame = {"x": x, "o": with_a}
            assert st.check(frame) and not st.check({"x": x, "o": without})
    assert kinds["0/0"] != ("empty", 0), kinds
    if policy != "guarded-minimal":
        assert kinds["0/0"] == ("reduced", 0), kinds
    with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
        assert opt(x, with_a).tolist() == [1.0, 1.0]
        assert opt(x, without).tolist() == [-1.0, -1.0]  # 0/0 is at the front


def test_partial_activation(torch_calls):
    """guardjit.compile beside plain torch.compile on one code, without
    guardjit.install(): the plain units are opaque, and the guardjit units
    keep their whole sets against them."""
    import guardjit

    _PARTIAL_COMPILE[0] = guardjit.compile
    before = guardjit.stats()["diffset_opaque"]
    try:
        calls = run_adv("partial_activation", oracle=True)
    finally:
        _PARTIAL_COMPILE[0] = torch.compile
    _judge("partial_activation", calls, torch_calls["partial_activation"])
    assert guardjit.stats()["diffset_opaque"] > before


def test_adversarial_with_autoload_interpreter(torch_calls):
    """GUARDJIT=1 (the .pth autoload), GUARDJIT_MODE=interpreter, minimal."""
    env = dict(_plain_env(), GUARDJIT="1", GUARDJIT_MODE="interpreter",
               GUARDJIT_DIFFSET_POLICY="minimal")
    got = _subprocess(env, oracle=True)
    for name in sorted(ADV):
        _judge(name, got[name], torch_calls[name])


def main() -> None:
    oracle = "--oracle" in sys.argv
    autoload = bool(os.environ.get("GUARDJIT"))
    if not autoload:
        assert "guardjit" not in sys.modules, "run with GUARDJIT unset"
    out = {name: run_adv(name, oracle) for name in sorted(ADV)}
    if autoload:  # the .pth converted the units (nothing here installs guardjit)
        import guardjit

        s = guardjit.stats()
        assert s["units_native"] + s["units_interpreter"] > 0 and s["diffset_updates"] > 0, s
    print(json.dumps(out))


if __name__ == "__main__":
    main()
