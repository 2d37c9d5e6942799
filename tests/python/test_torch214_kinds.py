"""The torch 2.14 kinds, native and exact: COW_TENSOR_MATCH
(``cow_tensor_match``) and ContextVarGetSource's ``x.get(d)`` accessor
(``contextvar_get``).

On torch 2.14.1, a compiled function calling ``torch._C._is_cow_tensor`` on an
input, and one reading ContextVar globals with and without a default: every
compile unit is native with no Python guard and no Python frame in its check
(Dynamo's own tree enters the lambdas), and on every mutation (copy-on-write or
not, a Python-subclass tensor, the variable set, reset and unset, another
context) guardjit's native check, its interpreter and Dynamo's tree agree; the
real call path (outputs, recompiles) equals plain torch.compile's and eager.

On both releases, the native helpers against torch's own code: the COW hook
(lib/TorchRuntime, built against either release) against torch 2.14's
``_cow_tensor_matches`` (its 2.14 source on a 2.13 build), and the ContextVar
read against the lambda it replaces, on hand-built guard sets.
"""

from __future__ import annotations

import contextvars
import types

import pytest
import torch
import torch._dynamo.guards as dynamo_guards
from torch._dynamo.testing import CompileCounter

import guardjit
from guardjit import _core, lambdas, plugin
from guardjit.lab import frames

TORCH_214 = hasattr(dynamo_guards.GuardBuilder, "COW_TENSOR_MATCH")
needs_214 = pytest.mark.skipif(
    not TORCH_214, reason="torch 2.13 emits neither COW_TENSOR_MATCH nor ContextVarGetSource "
                          "(both new in torch 2.14)")
LEVELS = ("O0", "light", "O1")


def _agree(units, variants):
    """Dynamo's tree, guardjit's native root and callable and its interpreter
    on each variant (a dict of frame-local changes, or a callable making the
    program state change and returning such a dict and an undo)."""
    answers = []
    for u in units:
        for label, change in variants:
            undo = None
            if callable(change):
                change, undo = change()
            f_locals = dict(u.f_locals)
            f_locals.update(change)
            try:
                expected = u.dynamo_root.check(f_locals)
                got = (u.native_root.check(f_locals), u.check(f_locals),
                       u.bound.interpret(f_locals))
            finally:
                if undo is not None:
                    undo()
            assert got == (expected,) * 3, f"{label}: dynamo={expected} got={got}"
            answers.append(expected)
    return answers


def _units_with(kind, text_has):
    units = [u for u in plugin.units() if text_has in u.ir.print()]
    assert units, f"no unit with {text_has}"
    for u in units:
        assert u.status == "native", u.reason
        assert u.python_guards == 0, u.ir.print()
        # Dynamo's tree runs torch's Python lambda; guardjit's check none.
        assert frames.count_python_frames(u.check, u.f_locals) == 0, \
            frames.python_frames_by_function(u.check, u.f_locals)
        assert frames.count_python_frames(u.dynamo_root.check, u.f_locals) > 0, kind
        assert "= lambda" not in u.ir.print() and "guard lambda" not in u.ir.print()
    return units


class Sub(torch.Tensor):
    """A plain Python subclass: no Python dispatch key."""


def _cow(n=3):
    return torch._lazy_clone(torch.ones(n))


def _materialized():
    c = _cow()
    c.add_(0)  # the write copies: c no longer shares a COW storage
    return c


# --- COW_TENSOR_MATCH end to end (2.14) ------------------------------------------

def cow_branch(x):
    if torch._C._is_cow_tensor(x):
        return x + 1
    return x - 1


@needs_214
def test_cow_tensor_match_units_are_native_and_agree():
    before = guardjit.stats()
    compiled = guardjit.compile(cow_branch, backend="eager")
    plain, cow = torch.ones(3), _cow()
    assert torch.equal(compiled(plain), cow_branch(plain))
    assert torch.equal(compiled(cow), cow_branch(cow))  # recompiles: expected True
    after = guardjit.stats()
    assert after["fallback_reasons"] == before["fallback_reasons"]
    assert after["guards_python"] == before["guards_python"]
    units = _units_with("COW_TENSOR_MATCH", "guard cow_tensor_match")
    texts = "\n".join(u.ir.print() for u in units)
    assert "cow_tensor_match %1 source" in texts.replace(" origin=0", "")  # expected False
    assert "cow_tensor_match %1 int=1" in texts
    src = torch.ones(3)
    keep = torch._lazy_clone(src)  # src's storage becomes copy-on-write too
    answers = _agree(units, [
        ("plain", {"x": torch.ones(3)}),
        ("lazy clone", {"x": _cow()}),
        ("lazy clone's source", {"x": src}),
        ("written after the clone", {"x": _materialized()}),
        ("cow, detached", {"x": _cow().detach()}),
        ("Python subclass of a cow tensor", {"x": _cow().as_subclass(Sub)}),
        ("Python subclass", {"x": torch.ones(3).as_subclass(Sub)}),
        ("other shape, cow", {"x": _cow(4)}),
        ("not a tensor", {"x": 3}),
    ])
    del keep
    assert answers.count(True) >= 4 and False in answers


@needs_214
def test_cow_tensor_match_call_path_equals_plain_torch():
    def inputs():
        src = torch.ones(3)
        clone = torch._lazy_clone(src)
        return [torch.ones(3), _cow(), torch.ones(3), src, clone, _materialized(),
                torch.ones(3).as_subclass(Sub), _cow().as_subclass(Sub), _cow()]

    def run(compile_fn):
        torch._dynamo.reset()
        counter = CompileCounter()
        compiled = compile_fn(cow_branch, backend=counter)
        return [compiled(x) for x in inputs()], counter.frame_count

    torch_out, torch_frames = run(torch.compile)
    plugin.clear_units()
    gj_out, gj_frames = run(guardjit.compile)
    eager = [cow_branch(x) for x in inputs()]
    assert gj_frames == torch_frames
    for a, b, e in zip(torch_out, gj_out, eager):
        assert torch.equal(a, b) and torch.equal(b, e)
    assert plugin.units() and all(u.status == "native" for u in plugin.units())


# --- COW_TENSOR_MATCH's hook against torch's function (both releases) ------------

if TORCH_214:
    _cow_tensor_matches = dynamo_guards._cow_tensor_matches
else:
    # torch 2.14's source (torch/_dynamo/guards.py), which 2.13 lacks; the
    # hook guardjit builds against 2.13 answers as 2.14's lambda would.
    _UNSUPPORTED = object()

    def _try_is_cow_tensor(value):
        if not isinstance(value, torch.Tensor):
            return _UNSUPPORTED
        if torch._C._dispatch_keys(value).has(torch._C.DispatchKey.Python):
            return _UNSUPPORTED
        return torch._C._is_cow_tensor(value)

    def _cow_tensor_matches(value, expected):
        if not isinstance(expected, bool):
            return False
        actual = _try_is_cow_tensor(value)
        return actual is not _UNSUPPORTED and actual == expected


def _torch_answer(value, expected):
    """Dynamo's LAMBDA_GUARD of guard_fn: a raise is a failed guard."""
    try:
        return bool(_cow_tensor_matches(value, expected))
    except Exception:
        return False


class NotATensor:
    __class__ = property(lambda self: int)  # isinstance runs this property


class RaisingClass:
    @property
    def __class__(self):
        raise RuntimeError("no class")


class ClaimsTensor:
    __class__ = property(lambda self: torch.Tensor)


def _cow_values():
    from torch.testing._internal.two_tensor import TwoTensor

    src = torch.ones(3)
    clone = torch._lazy_clone(src)
    return [
        ("plain", torch.ones(3)),
        ("lazy clone", clone),
        ("lazy clone's source", src),
        ("written after the clone", _materialized()),
        ("Parameter", torch.nn.Parameter(torch.ones(2))),
        ("Parameter over a cow tensor", torch.nn.Parameter(_cow())),
        ("Python subclass of a cow tensor", _cow().as_subclass(Sub)),
        ("Python dispatch key (TwoTensor of cow tensors)", TwoTensor(_cow(), _cow())),
        ("sparse: storage() raises", torch.ones(2).to_sparse()),
        ("meta", torch.empty(3, device="meta")),
        ("requires_grad cow", torch._lazy_clone(torch.ones(2, requires_grad=True))),
        ("int", 3),
        ("None", None),
        ("__class__ property", NotATensor()),
        ("raising __class__", RaisingClass()),
    ]


@pytest.mark.parametrize("expected", [True, False])
def test_cow_hook_matches_torchs_function(expected):
    ir = _core.GuardSet("cow")
    key = ir.add_object("key", "x", True, "'x'")
    x = ir.add_value("frame_local", 0, "L['x']", "x", 0, key)
    ir.add_guard("cow_tensor_match", [x], int=int(expected))
    bound = _core.bind(ir)
    natives = [_core.make_guard(bound, _core.compile(bound, lvl)) for lvl in LEVELS]
    answers = []
    for label, value in _cow_values():
        want = _torch_answer(value, expected)
        f_locals = {"x": value}
        got = [bound.interpret(f_locals)] + [n(f_locals) for n in natives]
        assert got == [want] * len(got), f"{label}: torch={want} guardjit={got}"
        answers.append(want)
    # Both answers occur: the variants reach the guards (a check that always
    # passed, or always failed, would agree with Dynamo vacuously).
    assert True in answers and False in answers
    # Where torch's lambda would unpack an object that only claims to be a
    # tensor (it segfaults: torch._C._dispatch_keys(ClaimsTensor())), the
    # guard fails.
    assert bound.interpret({"x": ClaimsTensor()}) is False
    assert all(n({"x": ClaimsTensor()}) is False for n in natives)
    # The native check of a tensor runs no Python.
    assert frames.count_python_frames(natives[1], {"x": _cow()}) == 0


# --- ContextVar.get end to end (2.14) --------------------------------------------

CV = contextvars.ContextVar("CV")
CV_OWN = contextvars.ContextVar("CV_OWN", default=10)
CV_DFLT = contextvars.ContextVar("CV_DFLT")


def read_vars(x):
    return x * CV.get() + CV_OWN.get() + CV_DFLT.get(3)


def _setting(var, value):
    def change():
        token = var.set(value)
        return {}, lambda: var.reset(token)
    return change


def _in_fresh_context(fn):
    return contextvars.Context().run(fn)


@needs_214
def test_contextvar_units_are_native_and_agree():
    def body():
        CV.set(2)
        before = guardjit.stats()
        compiled = guardjit.compile(read_vars, backend="eager")
        x = torch.ones(2)
        assert torch.equal(compiled(x), read_vars(x))
        assert guardjit.stats()["fallback_reasons"] == before["fallback_reasons"]
        units = _units_with("ContextVarGetSource", "contextvar_get")
        reads = [line for u in units for line in u.ir.print().splitlines()
                 if "= contextvar_get" in line]
        # get() has no key; get(3) has its default's.
        assert len(reads) == 3, reads
        assert [("key=#" in line) for line in reads if ".get(3)" in line] == [True]
        assert not any("key=#" in line for line in reads if ".get()" in line)
        answers = _agree(units, [
            ("same", {}),
            ("CV changed", _setting(CV, 3)),
            ("CV set to the same value again", _setting(CV, 2)),
            ("CV_OWN set", _setting(CV_OWN, 11)),
            ("CV_OWN set to its default", _setting(CV_OWN, 10)),
            ("CV_DFLT set", _setting(CV_DFLT, 4)),
            ("CV_DFLT set to its default", _setting(CV_DFLT, 3)),
        ])
        # Another context, where CV is 5, or has no value at all (Dynamo's
        # lambda raises LookupError: a failed read).
        other = contextvars.copy_context()
        other.run(CV.set, 5)
        unset = contextvars.Context()
        unset.run(CV_OWN.set, 10)
        for ctx in (other, unset):
            for u in units:
                expected = ctx.run(u.dynamo_root.check, dict(u.f_locals))
                got = (ctx.run(u.native_root.check, dict(u.f_locals)),
                       ctx.run(u.check, dict(u.f_locals)),
                       ctx.run(u.bound.interpret, dict(u.f_locals)))
                assert got == (expected,) * 3 and expected is False
        assert answers.count(True) >= 3 and False in answers

    _in_fresh_context(body)


@needs_214
def test_contextvar_call_path_equals_plain_torch():
    tokens = []

    def set_(var, value):
        return lambda: tokens.append((var, var.set(value)))

    def reset_last():
        var, token = tokens.pop()
        var.reset(token)

    steps = [set_(CV, 2), lambda: None, set_(CV, 3), reset_last, set_(CV_OWN, 7),
             set_(CV_DFLT, 1), reset_last, reset_last, set_(CV_DFLT, 3), reset_last,
             reset_last]  # the last reset leaves CV without a value

    def run(fn):
        def body():
            out = []
            for step in steps:
                step()
                try:
                    out.append(fn(torch.ones(2)))
                except LookupError as e:
                    out.append(type(e).__name__)
            return out
        tokens.clear()
        return _in_fresh_context(body)

    def compiled_run(compile_fn):
        torch._dynamo.reset()
        counter = CompileCounter()
        outs = run(compile_fn(read_vars, backend=counter))
        return outs, counter.frame_count

    torch_out, torch_frames = compiled_run(torch.compile)
    plugin.clear_units()
    gj_out, gj_frames = compiled_run(guardjit.compile)
    eager = run(read_vars)
    assert gj_frames == torch_frames
    assert len(gj_out) == len(torch_out) == len(eager) == len(steps)
    assert eager[-1] == "LookupError"
    for a, b, e in zip(torch_out, gj_out, eager):
        if isinstance(e, str):
            assert a == b == e
        else:
            assert torch.equal(a, b) and torch.equal(b, e)
    assert plugin.units() and all(u.status == "native" for u in plugin.units())


# --- contextvar_get against the lambda it replaces (both releases) ---------------

def _lambda_template(with_default):
    """torch 2.14's own lambda (its nested code object), or on 2.13 the same
    source."""
    code = lambdas._contextvar_get_code(with_default)
    if code is None:
        return (lambda x, d=None: x.get(d)) if with_default else (lambda x: x.get())
    return types.FunctionType(code, dynamo_guards.__dict__, None,
                              (None,) if with_default else None)


class Getter:
    """Not a ContextVar: the lambda calls its `get`."""

    def get(self, *default):
        return default[0] if default else _MARK


class RaisingGetter:
    def get(self, *default):
        raise LookupError("nothing")


class LiarVar:
    __class__ = property(lambda self: contextvars.ContextVar)

    def get(self, *default):
        return "liar"


_MARK = object()
_UNSET = contextvars.ContextVar("_UNSET")
_OWN = contextvars.ContextVar("_OWN", default="own")
_SET = contextvars.ContextVar("_SET")
_SET.set(_MARK)


@pytest.mark.parametrize("default", ["none given", None, 5, "text"])
def test_contextvar_read_matches_the_lambda(default):
    has_default = default != "none given"
    fn = _lambda_template(has_default)
    if has_default:
        fn = types.FunctionType(fn.__code__, fn.__globals__, None, (default,))

    def oracle(parent):
        try:
            return True, fn(parent)
        except Exception:
            return False, None

    seen = []
    ir = _core.GuardSet("cv")
    key = ir.add_object("key", "v", True, "'v'")
    v = ir.add_value("frame_local", 0, "L['v']", "v", 0, key)
    dkey = ir.add_object("constant", default, True, repr(default)) if has_default else -1
    got = ir.add_value("contextvar_get", v, "L['v'].get()", key=dkey)
    def record(value):
        seen.append(value)
        return True

    # add_object borrows: `record` and `default` outlive the bind below.
    ir.add_guard("lambda", [got], object=ir.add_object("callable", record, True, "<record>"))
    bound = _core.bind(ir)
    natives = [_core.make_guard(bound, _core.compile(bound, lvl)) for lvl in LEVELS]
    other = contextvars.copy_context()
    other.run(_SET.set, "other context")
    outcomes = []
    for parent in [_SET, _UNSET, _OWN, Getter(), RaisingGetter(), LiarVar(), {}, {5: "five"},
                   3, None]:
        for ctx in (None, other):
            ok, value = oracle(parent) if ctx is None else ctx.run(oracle, parent)
            for check in [bound.interpret] + natives:
                seen.clear()
                f_locals = {"v": parent}
                passed = check(f_locals) if ctx is None else ctx.run(check, f_locals)
                assert passed is ok, (parent, check)
                if ok:
                    assert len(seen) == 1 and seen[0] is value, (parent, seen, value)
            outcomes.append(ok)
    # Both answers occur: the variants reach the guards (a check that always
    # passed, or always failed, would agree with Dynamo vacuously).
    assert True in outcomes and False in outcomes


# --- the recognizers ---------------------------------------------------------------

def test_recognizers_need_torchs_own_templates():
    assert lambdas.cow_tensor_match(lambda x: True) is None
    assert lambdas.contextvar_get(lambda x: x.get()) is None
    assert lambdas.contextvar_get(lambda x, d=3: x.get(d)) is None
    if not TORCH_214:
        # torch 2.13 has neither template: nothing matches.
        assert lambdas._contextvar_get_code(True) is None
        assert lambdas._contextvar_get_code(False) is None
        return
    nested = next(c for c in dynamo_guards.GuardBuilder.COW_TENSOR_MATCH.__code__.co_consts
                  if getattr(c, "co_name", None) == "guard_fn")

    def guard_fn(expected):
        cell = types.CellType(expected)
        return types.FunctionType(nested, dynamo_guards.__dict__, None, None, (cell,))

    assert lambdas.cow_tensor_match(guard_fn(True)) == lambdas.CowTensorMatch(True)
    assert lambdas.cow_tensor_match(guard_fn(False)) == lambdas.CowTensorMatch(False)
    assert lambdas.cow_tensor_match(guard_fn(1)) is None  # not a bool: another answer
    no_default = types.FunctionType(lambdas._contextvar_get_code(False), {})
    assert lambdas.contextvar_get(no_default) == lambdas.ContextVarGet(False, None)
    with_default = types.FunctionType(lambdas._contextvar_get_code(True), {}, None, (7,))
    assert lambdas.contextvar_get(with_default) == lambdas.ContextVarGet(True, 7)
    missing = types.FunctionType(lambdas._contextvar_get_code(True), {})
    assert lambdas.contextvar_get(missing) is None


@needs_214
def test_a_patched_cow_helper_fails_the_proof(monkeypatch):
    nested = next(c for c in dynamo_guards.GuardBuilder.COW_TENSOR_MATCH.__code__.co_consts
                  if getattr(c, "co_name", None) == "guard_fn")
    fn = types.FunctionType(nested, dynamo_guards.__dict__, None, None,
                            (types.CellType(True),))
    assert lambdas.cow_tensor_match(fn) is not None
    monkeypatch.setattr(dynamo_guards, "_try_is_cow_tensor", lambda value: True)
    assert lambdas.cow_tensor_match(fn) is None


# --- tensor reads of objects that are not tensors (both releases) -------------------

@pytest.mark.parametrize("accessor", ["grad", "tensor_size", "tensor_stride",
                                      "tensor_storage_offset"])
def test_tensor_reads_of_hostile_objects_fail_the_read(accessor):
    """A raising `__class__` made torch's THPVariable_Check throw a C++
    python_error out of guardjit's helper (the process aborted), and an object
    claiming to be a tensor was unpacked as one: both are a failed read, with
    no error left set, in the interpreter and at every level."""
    ir = _core.GuardSet("reads")
    key = ir.add_object("key", "x", True, "'x'")
    x = ir.add_value("frame_local", 0, "L['x']", "x", 0, key)
    v = ir.add_value(accessor, x, "L['x'].read", "read", 0, -1)
    ir.add_guard("not_none" if accessor == "grad" else "type_match", [v],
                 **({} if accessor == "grad"
                    else {"object": ir.add_object("type", int, False, "int")}))
    bound = _core.bind(ir)
    natives = [_core.make_guard(bound, _core.compile(bound, lvl)) for lvl in LEVELS]
    t = torch.ones(2, 3)
    t.grad = torch.zeros(2, 3)
    assert bound.interpret({"x": t}) is True
    for value in (RaisingClass(), ClaimsTensor(), NotATensor(), 3):
        f_locals = {"x": value}
        got = [bound.interpret(f_locals)] + [n(f_locals) for n in natives]
        assert got == [False] * len(got), (type(value).__name__, got)
