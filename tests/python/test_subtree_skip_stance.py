"""Subtree skipping beside the ``skip_guard_eval_unsafe`` stance (issue 14,
item 3): the stance runs guardjit's differentiating checks, computed from a
unit's full guard set, never from a skipping residual, so a skipped subtree
cannot hide a guard that tells two cache entries apart. Two entries of one
code object differ only in an attribute deep in a module subtree that both
units skip; every warmed value is served by its own entry under the stance,
before and after skipping engaged, and skipping keeps answering afterwards.
Plain torch runs the same program beside it.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import guardjit
from guardjit import plugin

# Tiny models: the mechanism, not whether a plan pays (conftest.py).
pytestmark = pytest.mark.usefixtures("skip_every_plan")


class Cfg:
    def __init__(self) -> None:
        self.act = "relu"  # a str: specialized (EQUALS_MATCH), never dynamic


class Inner(torch.nn.Module):
    def __init__(self, cfg: Cfg) -> None:
        super().__init__()
        self.cfg = cfg
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return torch.relu(y) if self.cfg.act == "relu" else torch.tanh(y)


class Outer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cfg = Cfg()
        self.blocks = torch.nn.ModuleList(Inner(self.cfg) for _ in range(3))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def _skip() -> dict:
    return guardjit.stats()["subtree_skip"]


def test_stance_routes_every_warmed_value_with_skipping_on():
    torch.manual_seed(0)
    eager = Outer()
    gj_model, pt_model = copy.deepcopy(eager), copy.deepcopy(eager)
    gj_count, pt_count = CompileCounter(), CompileCounter()
    gj = guardjit.compile(gj_model, backend=gj_count)
    pt = torch.compile(pt_model, backend=pt_count)
    x = torch.randn(2, 4)

    def call(act: str):
        for m in (eager, gj_model, pt_model):
            if m.cfg.act != act:  # a write bumps the dict's version tag
                m.cfg.act = act
        want = eager(x)
        got_gj, got_pt = gj(x), pt(x)
        torch.testing.assert_close(got_gj, want)
        torch.testing.assert_close(got_pt, want)

    units_before = _skip()["units"]
    with torch.no_grad():
        for act in ("relu", "tanh"):  # two cache entries, one per warmed value
            call(act)
            call(act)
        plugin.wait_for_tier_up()
        assert gj_count.frame_count == pt_count.frame_count == 2
        assert _skip()["units"] - units_before == 2, _skip()
        hits = _skip()["hits"]
        for _ in range(3):
            call("tanh")
        assert _skip()["hits"] > hits, "subtree skipping never engaged"

        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            for act in ("relu", "tanh", "tanh", "relu", "relu", "tanh"):
                call(act)
        assert gj_count.frame_count == pt_count.frame_count == 2, "the stance recompiled"

        # After the stance, skipping answers again (and a change falls back).
        hits, fallbacks = _skip()["hits"], _skip()["fallbacks"]
        for _ in range(3):
            call("relu")
        assert _skip()["hits"] > hits
        call("tanh")
        assert _skip()["fallbacks"] > fallbacks
        assert gj_count.frame_count == pt_count.frame_count == 2
