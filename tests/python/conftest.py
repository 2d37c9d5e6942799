"""Shared fixtures: every test starts with an empty Dynamo cache and records
guardjit's compile units."""

from __future__ import annotations

import gc

import pytest
import torch

import guardjit
from guardjit import plugin


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    plugin.clear_units()
    plugin.config.keep_units = True
    plugin.config.keep_frame_locals = True
    yield
    plugin.config.keep_units = False
    plugin.config.keep_frame_locals = False
    plugin.config.route_all = False
    plugin.clear_units()
    torch._dynamo.reset()


@pytest.fixture
def skip_every_plan():
    """Subtree skipping plans whenever it can: the cost model, which declines
    plans that would not pay on tiny units, is off (tests of the mechanism)."""
    saved = plugin.config.subtree_skip_cost_model
    plugin.config.subtree_skip_cost_model = False
    yield
    plugin.config.subtree_skip_cost_model = saved


@pytest.fixture(autouse=True)
def no_foreign_gc_callbacks():
    """Each test runs without the GC callbacks an earlier one installed.

    torch 2.13's eval frame raises "Recompilation triggered" for every code
    object it first meets under skip_guard_eval_unsafe, before its skip rules
    (torch/csrc/dynamo/eval_frame_cpp.cpp). A Python GC callback that a
    collection runs inside a compiled call is such a frame: hypothesis installs
    one (once per session) when its tests run. The error goes to
    sys.unraisablehook and the compiled call runs without an entry, in plain
    torch as with guardjit (measured with gc.set_threshold(20): both ran no
    entry for the first call under the stance). Hypothesis then measures no
    GC time, which it only reports."""
    saved = gc.callbacks[:]
    gc.callbacks.clear()
    yield
    gc.callbacks[:] = saved


@pytest.fixture
def units():
    """The compile units guardjit saw in this test."""
    return plugin.units


def pytest_configure(config):
    assert guardjit.enabled(), "guardjit must be able to run on the verified torch/Python"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` run only with GUARDJIT_SLOW_TESTS=1 (or ``-m slow``)."""
    import os

    if os.environ.get("GUARDJIT_SLOW_TESTS") == "1" or "slow" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="slow: set GUARDJIT_SLOW_TESTS=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
