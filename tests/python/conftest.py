"""Shared fixtures: every test starts with an empty Dynamo cache and records
guardjit's compile units."""

from __future__ import annotations

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
