"""Lifetime of a unit's check (issue 15): when its cache entry dies, as
Dynamo itself invalidates it, the check target (bound set, native code,
subtree-skipping plan, residual check) is freed, also while its background
compile is queued or running. Counted with ``_core.live_checks()``; every
program also runs with plain torch's answers (eager) beside it."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

import guardjit
from guardjit import _core, plugin


@pytest.fixture
def no_unit_records(monkeypatch):
    """guardjit installed for every torch.compile; unit records hold their
    checks, so these tests keep none."""
    monkeypatch.setattr(plugin.config, "keep_units", False)
    monkeypatch.setattr(plugin.config, "keep_frame_locals", False)
    plugin.clear_units()
    assert guardjit.install()
    yield
    guardjit.uninstall()


def settle() -> int:
    """Live checks once garbage is collected and the background tier has
    drained (it hands dead targets back to the GIL holder)."""
    gc.collect()
    assert plugin.wait_for_tier_up(120)
    gc.collect()
    return _core.live_checks()


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


def _fresh_function(i: int):
    ns: dict = {}
    exec(f"def unit_{i}(m, x):\n    return m(x) * {i + 1}\n", ns)
    return ns[f"unit_{i}"]


@pytest.mark.parametrize("when", ["after_native", "while_compiling"])
def test_reset_frees_every_check(no_unit_records, when):
    base = settle()
    m, x = _model(), torch.randn(2, 8)
    fns = [torch.compile(_fresh_function(i), backend="eager") for i in range(6)]
    with torch.no_grad():
        for i, fn in enumerate(fns):
            assert torch.equal(fn(m, x), m(x) * (i + 1))
        assert guardjit.stats()["units_native"] >= 6
        if when == "after_native":
            assert plugin.wait_for_tier_up(120)
        assert _core.live_checks() >= base + 6
        torch._dynamo.reset()
    assert settle() == base


def test_guarded_object_collected_frees_its_check(no_unit_records):
    """Dynamo invalidates a cache entry whose ID_MATCH'd object dies (a
    ``weakref.finalize`` on it calls CheckFunctionManager.invalidate): here a
    class passed as an argument. The check goes with the entry, although
    torch keeps the entry's wrapper alive."""
    base = settle()
    x = torch.randn(2, 8)

    def run(c):
        return x * c.k

    opt = torch.compile(run, backend="eager")
    ns: dict = {}
    exec("class Two:\n    k = 2\n", ns)
    with torch.no_grad():
        assert torch.equal(opt(ns["Two"]), x * 2)
    live = settle()
    assert live > base
    released = guardjit.stats().get("units_released", 0)
    ns.clear()  # the class dies: torch invalidates the entry
    assert settle() == base
    assert guardjit.stats().get("units_released", 0) > released
    # The code compiles again for a new class, and answers right.
    exec("class Three:\n    k = 3\n", ns)
    with torch.no_grad():
        assert torch.equal(opt(ns["Three"]), x * 3)

