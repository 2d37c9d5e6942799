"""guardjit.compile is a drop-in torch.compile (issue 13, item 6).

Every point of the surface a user touches runs side by side: once with
``torch.compile`` and once with ``guardjit.compile``, each after
``torch._dynamo.reset()``, on the same model class. Both sides must behave
alike (same types, same values, same exceptions), and the guardjit side must
still be guardjit's: its cache entry runs guardjit's check
(``GuardJitManagerWrapper``), the torch side's does not.
"""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn
from torch._dynamo.eval_frame import OptimizedModule

import guardjit
from guardjit import plugin

COMPILERS = {"torch": torch.compile, "guardjit": guardjit.compile}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.register_buffer("scale", torch.arange(1.0, 4.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) * self.scale


class Parent(nn.Module):
    """Holds a compiled child: Dynamo unwraps an OptimizedModule it traces."""

    def __init__(self, child: nn.Module) -> None:
        super().__init__()
        self.child = child

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.child(x) + 1


def fn(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2


def _x() -> torch.Tensor:
    return torch.linspace(-1, 1, 8).reshape(2, 4)


def _net() -> Net:
    torch.manual_seed(0)
    return Net()


def _entries(code) -> list:
    return torch._C._dynamo.eval_frame._debug_get_cache_entry_list(code)


def _guardjit_checks(code) -> list[bool]:
    """Per cache entry of ``code``: whether guardjit's check is its root."""
    return [isinstance(e.guard_manager, plugin.GuardJitManagerWrapper) for e in _entries(code)]


def _side(name: str) -> None:
    torch._dynamo.reset()


def _expect_owner(name: str, code=Net.forward.__code__) -> None:
    checks = _guardjit_checks(code)
    assert checks, "nothing was compiled"
    assert all(checks) if name == "guardjit" else not any(checks), (name, checks)


def _outcome(f):
    """('ok', value) or ('raises', exception type): compared across sides."""
    try:
        return "ok", f()
    except Exception as e:
        return "raises", type(e)


@pytest.mark.parametrize("name", COMPILERS)
def test_type_isinstance_and_orig_mod(name):
    _side(name)
    model = _net()
    opt = COMPILERS[name](model, backend="eager")
    assert type(opt) is OptimizedModule
    assert isinstance(opt, nn.Module) and isinstance(opt, OptimizedModule)
    assert not isinstance(opt, Net)
    assert opt._orig_mod is model
    assert opt.lin is model.lin  # attributes read through to the module
    assert opt.training and (opt.eval() is opt) and not model.training
    assert torch.equal(opt(_x()), model(_x()))
    _expect_owner(name)


def _round_trips():
    def save_load(opt):
        buf = io.BytesIO()
        torch.save(opt, buf)
        buf.seek(0)
        return torch.load(buf, weights_only=False)

    return {"pickle": lambda opt: pickle.loads(pickle.dumps(opt)),
            "torch.save": save_load,
            "deepcopy": copy.deepcopy}


@pytest.mark.parametrize("how", sorted(_round_trips()))
def test_round_trips_side_by_side(how):
    got = {}
    for name, compile_fn in COMPILERS.items():
        _side(name)
        model = _net()
        opt = compile_fn(model, backend="eager")
        want = opt(_x())
        copy_ = _round_trips()[how](opt)  # the issue: raised PicklingError for guardjit
        assert type(copy_) is OptimizedModule
        assert copy_._orig_mod is not model and type(copy_._orig_mod) is Net
        assert type(copy_.dynamo_ctx) is type(opt.dynamo_ctx)
        for k, v in model.state_dict().items():
            assert torch.equal(copy_._orig_mod.state_dict()[k], v), k
        torch._dynamo.reset()  # the copy must compile, and be guardjit's again
        assert torch.equal(copy_(_x()), want)
        _expect_owner(name)
        # A copy is independent of its original.
        with torch.no_grad():
            copy_._orig_mod.lin.bias.add_(1.0)
        assert not torch.equal(copy_._orig_mod.lin.bias, model.lin.bias)
        got[name] = want
    assert torch.equal(got["torch"], got["guardjit"])


def test_pickle_dumps_names_guardjit_context():
    # The mark survives pickling because it lives in dynamo_ctx: the class
    # pickle names must resolve in guardjit (was: PicklingError).
    opt = guardjit.compile(_net(), backend="eager")
    assert type(opt.dynamo_ctx) is guardjit.GuardJitOptimizeContext
    assert b"GuardJitOptimizeContext" in pickle.dumps(opt)
    assert b"GuardJitOptimizeContext" not in pickle.dumps(torch.compile(_net(), backend="eager"))


def test_torch_load_weights_only_side_by_side():
    outcomes = {}
    for name, compile_fn in COMPILERS.items():
        _side(name)
        buf = io.BytesIO()
        torch.save(compile_fn(_net(), backend="eager"), buf)
        buf.seek(0)
        outcomes[name] = _outcome(lambda: torch.load(buf, weights_only=True))
    assert outcomes["torch"] == outcomes["guardjit"] == ("raises", pickle.UnpicklingError)


def test_state_dict_side_by_side():
    sds = {}
    for name, compile_fn in COMPILERS.items():
        _side(name)
        opt = compile_fn(_net(), backend="eager")
        opt(_x())
        sds[name] = opt.state_dict()
    assert list(sds["torch"]) == list(sds["guardjit"]) == [
        "_orig_mod." + k for k in _net().state_dict()]
    for k in sds["torch"]:
        assert torch.equal(sds["torch"][k], sds["guardjit"][k]), k
    # load_state_dict: a compiled module's dict loads; the eager module's keys
    # (no _orig_mod. prefix) are rejected the same way on both sides.
    results = {}
    for name, compile_fn in COMPILERS.items():
        _side(name)
        torch.manual_seed(1)
        opt = compile_fn(Net(), backend="eager")
        opt.load_state_dict(sds["torch"])
        out = opt(_x())
        _expect_owner(name)
        results[name] = (out, _outcome(lambda: opt.load_state_dict(_net().state_dict())))
    assert torch.equal(results["torch"][0], results["guardjit"][0])
    assert torch.equal(results["guardjit"][0], _net()(_x()))
    assert results["torch"][1] == results["guardjit"][1] == ("raises", RuntimeError)


@pytest.mark.parametrize("name", COMPILERS)
def test_function_and_decorator_forms(name):
    compile_fn = COMPILERS[name]
    _side(name)
    plain = compile_fn(fn, backend="eager")
    bare = compile_fn(fn)  # @torch.compile without arguments (inductor is never run)

    @compile_fn(backend="eager")
    def deco(x):
        return torch.cos(x) + 1

    assert torch.equal(plain(_x()), fn(_x()))
    assert torch.equal(deco(_x()), torch.cos(_x()) + 1)
    assert plain.__name__ == "fn" and plain.__wrapped__ is not None
    assert plain._torchdynamo_orig_callable is fn
    assert callable(bare) and bare._torchdynamo_orig_callable is fn
    _expect_owner(name, fn.__code__)
    _expect_owner(name, deco._torchdynamo_orig_callable.__code__)
    assert copy.deepcopy(plain) is plain  # functions copy as themselves
    assert _outcome(lambda: pickle.dumps(plain))[1] is pickle.PicklingError


def _method_class(compile_fn):
    class WithMethod(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.full((4,), 0.5))

        @compile_fn(backend="eager")
        def forward(self, x):
            return x * self.w

        @compile_fn(backend="eager")
        def helper(self, x):
            return x.sum(-1)

    return WithMethod


@pytest.mark.parametrize("name", COMPILERS)
def test_method_form(name):
    _side(name)
    cls = _method_class(COMPILERS[name])
    m = cls()
    assert torch.equal(m(_x()), _x() * 0.5)
    assert torch.equal(m.helper(_x()), _x().sum(-1))
    _expect_owner(name, cls.forward._torchdynamo_orig_callable.__code__)
    _expect_owner(name, cls.helper._torchdynamo_orig_callable.__code__)


@pytest.mark.parametrize("name", COMPILERS)
def test_nn_module_compile_method(name):
    # Module.compile() calls torch.compile itself: guardjit takes it over
    # where it takes over every torch.compile (GUARDJIT=1 or install()).
    _side(name)
    if name == "guardjit":
        assert guardjit.install()
    try:
        m = _net()
        before = len(plugin.units())
        m.compile(backend="eager")
        assert type(m) is Net
        assert torch.equal(m(_x()), _net()(_x()))
        new = plugin.units()[before:]
        if name == "guardjit":
            assert new and all(u.status == "native" for u in new), new
        else:
            assert not new
        _expect_owner(name)
    finally:
        guardjit.uninstall()


@pytest.mark.parametrize("outer", COMPILERS)
@pytest.mark.parametrize("inner", COMPILERS)
def test_compiling_a_compiled_module(inner, outer):
    # torch.compile(torch.compile(m)) compiles m.forward again (innermost_fn)
    # and returns a function; every mix of the two behaves the same way.
    _side(inner + outer)
    model = _net()
    twice = COMPILERS[outer](COMPILERS[inner](model, backend="eager"), backend="eager")
    reference = torch.compile(torch.compile(_net(), backend="eager"), backend="eager")
    assert type(twice) is type(reference)
    assert twice._torchdynamo_orig_callable == model.forward
    torch._dynamo.reset()
    assert torch.equal(twice(_x()), model(_x()))
    _expect_owner(outer)


@pytest.mark.parametrize("name", COMPILERS)
def test_compiled_child_inside_a_fullgraph_compile(name):
    # Dynamo unwraps a nested OptimizedModule (exact type) and inlines a
    # compiled function (_torchdynamo_inline): no graph break either way.
    _side(name)
    compile_fn = COMPILERS[name]
    child = compile_fn(_net(), backend="eager")
    parent = compile_fn(Parent(child), backend="eager", fullgraph=True)
    assert torch.equal(parent(_x()), _net()(_x()) + 1)
    _expect_owner(name, Parent.forward.__code__)
    inner = compile_fn(fn, backend="eager")
    outer = compile_fn(lambda x: inner(x) - 1, backend="eager", fullgraph=True)
    assert torch.equal(outer(_x()), fn(_x()) - 1)


@pytest.mark.parametrize("name", COMPILERS)
def test_saved_module_loads_in_a_fresh_process(name, tmp_path):
    # The file is all the loading process has: it imports guardjit only
    # because the pickle names it (guardjit.models' class, and guardjit's
    # context), and guardjit converts the loaded module's units there;
    # torch's file loads as plain torch (no unit converted).
    import os
    import subprocess
    import sys
    import textwrap

    from guardjit import models

    _side(name)
    case = models.two_input_mlp()
    args = case.make_input()
    opt = COMPILERS[name](case.model, backend="eager")
    want = opt(*args)
    torch.save({"model": opt, "args": args, "want": want}, tmp_path / "m.pt")
    script = textwrap.dedent(f"""
        import sys, torch
        saved = torch.load({str(tmp_path / "m.pt")!r}, weights_only=False)
        out = saved["model"](*saved["args"])
        assert torch.equal(out, saved["want"])
        gj = sys.modules.get("guardjit")
        print(type(saved["model"]).__name__, type(saved["model"].dynamo_ctx).__name__,
              gj.stats()["units_native"] if gj else None)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDJIT")}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=300, cwd="/")
    assert r.returncode == 0, r.stderr
    ctx = "GuardJitOptimizeContext" if name == "guardjit" else "OptimizeContext"
    units = "1" if name == "guardjit" else "0"
    assert r.stdout.split() == ["OptimizedModule", ctx, units]


@pytest.mark.parametrize("name", COMPILERS)
def test_disable_returns_the_model_itself(name):
    model = _net()
    forward = model.forward
    assert COMPILERS[name](model, disable=True) is model
    assert COMPILERS[name](fn, disable=True) is fn
    assert model.forward == forward and "forward" not in model.__dict__
