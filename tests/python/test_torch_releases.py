"""What differs between the torch releases guardjit verifies (2.13.0, 2.14.1),
each on real functions: the unit is native and guardjit answers as Dynamo's
own tree on every variant (as in test_torch213_kinds.py), and the call path
recompiles exactly as plain torch does.

The differences (docs/porting.md, "What changed from 2.13.0 to 2.14.1"):

* object aliasing: 2.14.1 checks it with C++ OBJECT_ALIASING guards
  (``use_lamba_guard_for_object_aliasing = False``), 2.13.0 with one root
  lambda; both forms are native under either value of the option;
* the LocalState of a root: on 2.14.1 TENSOR_MATCH and DISPATCH_KEY_SET_MATCH
  apply the root's LocalState when built (``set_local_state``: a loaded
  package's), not always this thread's;
* SEQUENCE_LENGTH of a set is ``set.__len__``, not ``len``, on 2.14.1;
* SUPPORTED_NODES' DICT_VERSION guard becomes a keys match when guards are
  saved (caching precompile), on 2.14.1.
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import guardjit
from guardjit import _compat, plugin
from unit_agreement import agree

AT_2_14 = _compat.at_least("2.14.1")
only_2_14 = pytest.mark.skipif(not AT_2_14, reason="torch 2.14.1 behaviour")


def _native(units):
    assert units, "no compile unit"
    for u in units:
        assert u.status == "native", u.reason
    return units


def _same_as_plain_torch(fn, calls):
    """Frame counts and results of plain torch and guardjit over the calls."""
    plain_cnt, gj_cnt = CompileCounter(), CompileCounter()
    plain = torch.compile(fn, backend=plain_cnt)
    plain_out = [plain(*args) for args in calls]
    torch._dynamo.reset()
    gj = guardjit.compile(fn, backend=gj_cnt)
    gj_out = [gj(*args) for args in calls]
    assert gj_cnt.frame_count == plain_cnt.frame_count
    for a, b in zip(plain_out, gj_out):
        torch.testing.assert_close(a, b)
    return gj_cnt.frame_count


def test_stats_name_the_torch_release():
    assert guardjit.stats()["torch"] == torch.__version__
    assert _compat.torch_release() in _compat.VERIFIED_TORCH


# --- object aliasing: C++ guards (2.14.1's default) and the lambda ---------------

def _aliased(a, b):
    return a.weight.sum() + b.weight.sum()


@pytest.mark.parametrize("use_lambda", [True, False])
def test_object_aliasing_both_forms(use_lambda):
    lin = torch.nn.Linear(2, 2)
    other = torch.nn.Linear(2, 2)
    python_before = guardjit.stats()["guards_python"]
    with torch._dynamo.config.patch(use_lamba_guard_for_object_aliasing=use_lambda):
        compiled = guardjit.compile(_aliased, backend="eager")
        compiled(lin, lin)
        units = _native(plugin.units())
        # Either form becomes native object_aliasing guards (the lambda's
        # code parts through guardjit/aliasing.py).
        assert "object_aliasing" in units[0].ir.print()
        answers = agree(units, [("same", {}), ("distinct", {"b": other}),
                                 ("swapped", lambda fl: {"a": other, "b": other})])
        # Both answers occur: the variants reach the guards (a check that always
        # passed, or always failed, would agree with Dynamo vacuously).
        assert True in answers and False in answers
        assert guardjit.stats()["guards_python"] == python_before
    torch._dynamo.reset()
    plugin.clear_units()
    with torch._dynamo.config.patch(use_lamba_guard_for_object_aliasing=use_lambda):
        assert _same_as_plain_torch(_aliased, [(lin, lin), (lin, other), (other, other)]) >= 2


# --- the LocalState a root applies -------------------------------------------------

_AUTOGRAD_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradCPU)


def _plus_one(x):
    return x + 1


def test_tensor_match_under_an_excluded_dispatch_key():
    """Built under an excluded key, checked outside it (and the other way)."""
    x = torch.randn(3)
    compiled = guardjit.compile(_plus_one, backend="eager")
    with torch._C._ExcludeDispatchKeyGuard(_AUTOGRAD_CPU):
        compiled(x)
    units = _native(plugin.units())
    answers = agree(units, [("same", {})])
    with torch._C._ExcludeDispatchKeyGuard(_AUTOGRAD_CPU):
        answers += agree(units, [("under the exclusion", {})])
    # Both answers occur: the variants reach the guards (a check that always
    # passed, or always failed, would agree with Dynamo vacuously).
    assert True in answers and False in answers

    def run(calls):
        out = []
        for excluded in calls:
            if excluded:
                with torch._C._ExcludeDispatchKeyGuard(_AUTOGRAD_CPU):
                    out.append(compiled_fn(x))
            else:
                out.append(compiled_fn(x))
        return out

    counts = []
    for make in (lambda c: torch.compile(_plus_one, backend=c),
                 lambda c: guardjit.compile(_plus_one, backend=c)):
        torch._dynamo.reset()
        cnt = CompileCounter()
        compiled_fn = make(cnt)
        run([True, False, True, False])
        counts.append(cnt.frame_count)
    assert counts[0] == counts[1] == 2


@only_2_14
def test_root_local_state_is_the_one_tensor_match_applies():
    """A root given another LocalState (as a loaded package's) before its
    guards are added: Dynamo's TENSOR_MATCH and DISPATCH_KEY_SET_MATCH apply
    that state, and so must guardjit's recording of them."""
    from torch._C._dynamo import guards as C

    from guardjit import recorder

    with torch._C._ExcludeDispatchKeyGuard(_AUTOGRAD_CPU):
        excluded_state = C.RootGuardManager().get_local_state()
    x = torch.randn(3)
    keys = torch._C._dispatch_keys(x)

    class Rec:
        root = C.RootGuardManager()

    Rec.root.set_local_state(excluded_state)
    plain = recorder._applied_keys(type("R", (), {"root": C.RootGuardManager()}), keys)
    applied = recorder._applied_keys(Rec, keys)
    assert applied != plain
    with torch._C._ExcludeDispatchKeyGuard(_AUTOGRAD_CPU):
        now = recorder._applied_keys(type("R", (), {"root": C.RootGuardManager()}), keys)
    assert applied == now


@only_2_14
def test_loaded_root_with_a_saved_local_state_agrees_with_dynamo():
    """CheckFunctionManager(guard_build_local_state=...) as package loading
    builds it: the root's state is set before any guard is added."""
    import torch._dynamo.guards as dynamo_guards

    from torch._C._dynamo import guards as C

    with torch._C._ExcludeDispatchKeyGuard(_AUTOGRAD_CPU):
        excluded_state = C.RootGuardManager().get_local_state()
    original = dynamo_guards.CheckFunctionManager.__init__

    @functools.wraps(original)
    def with_saved_state(self, *args, **kwargs):
        kwargs.setdefault("guard_build_local_state", excluded_state)
        return original(self, *args, **kwargs)

    x = torch.randn(3)
    dynamo_guards.CheckFunctionManager.__init__ = with_saved_state
    try:
        compiled = guardjit.compile(_plus_one, backend="eager")
        with torch._C._ExcludeDispatchKeyGuard(_AUTOGRAD_CPU):
            # Dynamo's own same-frame check runs under the state the guards
            # were built with.
            compiled(x)
    finally:
        dynamo_guards.CheckFunctionManager.__init__ = original
    units = _native(plugin.units())
    answers = agree(units, [("outside", {})])
    with torch._C._ExcludeDispatchKeyGuard(_AUTOGRAD_CPU):
        answers += agree(units, [("inside", {})])
    assert answers == [False, True]


# --- SEQUENCE_LENGTH of sets ------------------------------------------------------

class LyingSet(set):
    def __len__(self):
        return 99


def _set_size(x, s):
    return x + len(s)


def test_set_length():
    for s in ({1, 2}, LyingSet({1, 2}), frozenset({1, 2, 3})):
        torch._dynamo.reset()
        plugin.clear_units()
        compiled = guardjit.compile(_set_size, backend="eager")
        x = torch.ones(2)
        compiled(x, s)
        units = _native(plugin.units())
        kind = type(s)
        answers = agree(units, [
            ("same", {}),
            ("grown", {"s": kind(set(s) | {7})}),
            ("shrunk", {"s": kind(list(s)[:1])}),
            ("other type", {"s": list(s)}),
        ])
        # Both answers occur: the variants reach the guards (a check that always
        # passed, or always failed, would agree with Dynamo vacuously).
        assert True in answers and False in answers
        torch._dynamo.reset()
        plugin.clear_units()
        _same_as_plain_torch(_set_size, [(x, s), (x, kind(set(s) | {7})), (x, s)])


# --- SUPPORTED_NODES under caching precompile -------------------------------------

def _tree(x, d):
    return torch.utils._pytree.tree_map(lambda t: t + 1, d)["a"] + x


def test_pytree_supported_nodes_guard_saved_and_not():
    d = {"a": torch.ones(2)}
    x = torch.ones(2)
    for precompile in (False, True):
        torch._dynamo.reset()
        plugin.clear_units()
        with torch._dynamo.config.patch(caching_precompile=precompile):
            compiled = guardjit.compile(_tree, backend="eager")
            compiled(x, d)
            units = plugin.units()
            assert units
            for u in units:
                if u.status != "native":
                    continue
                answers = agree([u], [("same", {}),
                                       ("other x", {"x": torch.ones(2, dtype=torch.float64)})])
                # A unit that never passed would agree with Dynamo vacuously.
                assert True in answers
            torch._dynamo.reset()
            plugin.clear_units()
            _same_as_plain_torch(_tree, [(x, d), (torch.ones(2, dtype=torch.float64), d), (x, d)])


def test_set_length_entries_under_the_stance_route_as_plain_torch():
    """Two cache entries told apart only by a set's length (LENGTH_CHECK:
    `length_check_set_size` on 2.14.1), served under skip_guard_eval_unsafe
    from guardjit's differentiating roots: the same entries, results and
    frame counts as plain torch."""
    x = torch.ones(2)

    def run(compile_fn):
        torch._dynamo.reset()
        plugin.clear_units()
        cnt = CompileCounter()
        f = compile_fn(cnt)
        small, large = LyingSet({1, 2}), LyingSet({1, 2, 3})
        out = [f(x, small), f(x, large)]
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            out += [f(x, small), f(x, large), f(x, small)]
        return cnt.frame_count, [t.tolist() for t in out]

    plain = run(lambda c: torch.compile(_set_size, backend=c))
    gj = run(lambda c: guardjit.compile(_set_size, backend=c))
    # 2.13.0 guards the subclass's own __len__ (99 for both sets): one entry,
    # and the second set is served the first's graph, by plain torch too.
    assert plain[0] == (2 if AT_2_14 else 1)
    assert gj == plain
