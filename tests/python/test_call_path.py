"""The real call path: Dynamo's cache lookup runs guardjit's check.

The same call sequence (each mutation, then the original input again) runs on
a fresh copy of each model, once with plain torch.compile and once with
guardjit.compile: outputs, the number of compiled frames (recompiles) and the
number of cache entries must be identical.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import guardjit
from guardjit import models, plugin

CASES = sorted(models.DEFAULT_MODELS)


def _cache_entries(model: torch.nn.Module) -> int:
    code = type(model).forward.__code__
    return len(torch._C._dynamo.eval_frame._debug_get_cache_entry_list(code))


def _run(name: str, use_guardjit: bool):
    torch._dynamo.reset()
    case = models.DEFAULT_MODELS[name]()
    counter = CompileCounter()
    compile_fn = guardjit.compile if use_guardjit else torch.compile
    compiled = compile_fn(case.model, backend=counter)
    outputs, errors = [], []
    with torch.no_grad():
        plan = [("base", None)] + [(m, f) for m, f in case.mutations.items()] + [("base", None)]
        for label, mutate in plan:
            args = case.make_input()
            undo = lambda: None  # noqa: E731
            if mutate is not None:
                args, undo = mutate(case.model, args)
            try:
                outputs.append((label, compiled(*args)))
            except Exception as e:  # the eager model rejects it too (e.g. a list)
                errors.append((label, type(e).__name__))
            finally:
                undo()
    return outputs, errors, counter.frame_count, _cache_entries(case.model)


@pytest.mark.parametrize("name", CASES)
def test_same_outputs_recompiles_and_cache_entries(name):
    torch_out, torch_err, torch_frames, torch_entries = _run(name, use_guardjit=False)
    plugin.clear_units()
    gj_out, gj_err, gj_frames, gj_entries = _run(name, use_guardjit=True)
    assert gj_frames == torch_frames
    assert gj_entries == torch_entries
    assert gj_err == torch_err
    assert [label for label, _ in gj_out] == [label for label, _ in torch_out]
    for (label, a), (_, b) in zip(torch_out, gj_out):
        assert torch.equal(a, b), label
    # Every compile unit (a frame may compile without a graph, so there can
    # be more units than backend calls) runs guardjit's native check.
    units = plugin.units()
    assert len(units) >= gj_frames
    assert [u.reason for u in units if u.status != "native"] == []


def test_native_check_is_what_dynamo_runs():
    """After a call, the cache entry's guard manager is guardjit's wrapper and
    its root counts calls of the native check."""
    case = models.two_input_mlp()
    compiled = guardjit.compile(case.model, backend="eager")
    args = case.make_input()
    compiled(*args)
    from guardjit import _core

    # The first code lands on the background thread, behind whatever earlier
    # tests left queued.
    assert plugin.wait_for_tier_up(120)
    (unit,) = plugin.units()
    calls_before = _core.guard_counters(unit.check)[0]
    for _ in range(5):
        compiled(*args)
    calls, failures, native = _core.guard_counters(unit.check)
    assert native
    assert calls - calls_before == 5
    entries = torch._C._dynamo.eval_frame._debug_get_cache_entry_list(
        type(case.model).forward.__code__)
    assert len(entries) == 1
    assert isinstance(entries[0].guard_manager, plugin.GuardJitManagerWrapper)
    assert entries[0].guard_manager.root is unit.native_root


def test_recompile_reason_comes_from_dynamo_tree():
    case = models.two_input_mlp()
    compiled = guardjit.compile(case.model, backend="eager")
    x, y = case.make_input()
    compiled(x, y)
    (unit,) = plugin.units()
    f_locals = dict(unit.f_locals, x=x.double())
    info = torch._dynamo.guards.get_guard_fail_reason_helper  # noqa: F841 (exists in 2.13)
    wrapper = torch._C._dynamo.eval_frame._debug_get_cache_entry_list(
        type(case.model).forward.__code__)[0].guard_manager
    debug = wrapper.check_verbose(f_locals)
    assert not debug.result
    assert any("x" in part for part in debug.verbose_code_parts)
    assert "TENSOR_MATCH" in str(wrapper)


def test_plain_torch_compile_is_untouched_without_install():
    case = models.two_input_mlp()
    compiled = torch.compile(case.model, backend="eager")
    compiled(*case.make_input())
    assert plugin.units() == []


def test_install_routes_every_torch_compile():
    assert guardjit.install()
    try:
        case = models.two_input_mlp()
        compiled = torch.compile(case.model, backend="eager")
        compiled(*case.make_input())
        (unit,) = plugin.units()
        assert unit.status == "native"
    finally:
        guardjit.uninstall()


def test_stats_count_units_and_guards():
    before = guardjit.stats()
    case = models.cnn()
    guardjit.compile(case.model, backend="eager")(*case.make_input())
    after = guardjit.stats()
    assert after["units_seen"] == before["units_seen"] + 1
    assert after["units_native"] == before["units_native"] + 1
    assert after["guards_total"] > before["guards_total"]
    assert 0.9 < after["native_fraction"] <= 1.0
