"""Other ways Dynamo builds guard sets: the inductor backend, dynamic shapes
(sizes left unguarded, shape guards as a Python epilogue) and graph breaks
(several compile units per call)."""

from __future__ import annotations

import torch

import guardjit
from guardjit import models, plugin
from guardjit.lab import demo


def _agree(unit: plugin.Unit, f_locals: dict) -> bool:
    expected = unit.dynamo_root.check(f_locals)
    assert unit.native_root.check(f_locals) == expected
    assert unit.bound.interpret(f_locals) == expected
    return expected


def test_inductor_backend_same_guards_and_results():
    case = models.two_input_mlp()
    x, y = case.make_input()
    compiled = guardjit.compile(case.model, backend="inductor")
    out = compiled(x, y)
    assert torch.allclose(out, case.model(x, y), atol=1e-5)
    (unit,) = plugin.units()
    assert unit.status == "native", unit.reason
    assert _agree(unit, unit.f_locals)
    assert not _agree(unit, dict(unit.f_locals, x=x.double()))


def test_dynamic_shapes():
    case = models.two_input_mlp()
    compiled = guardjit.compile(case.model, backend="eager", dynamic=True)
    x, y = case.make_input()
    compiled(x, y)
    (unit,) = plugin.units()
    assert unit.status == "native", unit.reason
    # A different batch size is accepted by both (the dim is dynamic) ...
    x2, y2 = torch.randn(7, 32), torch.randn(7, 32)
    assert _agree(unit, demo._frame_locals_for(unit, (x2, y2)))
    # ... mismatched batch sizes are rejected by the shape guard (Python epilogue).
    assert not _agree(unit, demo._frame_locals_for(unit, (x2, torch.randn(5, 32))))
    assert not _agree(unit, demo._frame_locals_for(unit, (x2.double(), y2)))
    compiled(x2, y2)
    assert len(plugin.units()) == 1, "no recompile for a new batch size"


def test_graph_break_gives_several_native_units():
    def fn(x, scale):
        y = torch.sin(x) * scale
        torch._dynamo.graph_break()
        return torch.cos(y) + scale

    compiled = guardjit.compile(fn, backend="eager")
    x = torch.randn(8)
    out = compiled(x, 2.0)
    assert torch.allclose(out, torch.cos(torch.sin(x) * 2.0) + 2.0)
    units = plugin.units()
    assert len(units) >= 2
    assert all(u.status == "native" for u in units), [u.reason for u in units]
    for u in units:
        assert _agree(u, u.f_locals)
    compiled(x, 3.0)  # a new float value: both frames recompile with the same answers
    assert len(plugin.units()) > len(units)


def test_guard_filter_dropping_every_guard_gives_an_empty_native_set():
    case = models.two_input_mlp()
    compiled = guardjit.compile(
        case.model, backend="eager",
        options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe})
    x, y = case.make_input()
    compiled(x, y)
    (unit,) = plugin.units()
    assert unit.status == "native", unit.reason
    assert unit.guards == 0
    # Like Dynamo's empty tree, it accepts anything.
    assert _agree(unit, demo._frame_locals_for(unit, (x.double(), y)))
    # Nothing to check: the cache entry keeps Dynamo's empty root, which
    # torch's lookup skips (its no-guard fast path), instead of a root that
    # would call guardjit's check to answer True.
    assert unit.native_root is unit.dynamo_root
    assert guardjit.stats()["units_empty"] >= 1
