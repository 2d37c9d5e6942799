"""The cost model of subtree skipping (SubtreeSkip.h): a plan whose estimated
check is not clearly cheaper than the full check declines, with its reason in
guardjit.stats(); larger units still plan; switching the model off plans the
small unit again."""

from __future__ import annotations

import torch

import guardjit
from guardjit import _core, plugin
from guardjit.bench.corpus import CORPUS


def _plan(name: str) -> tuple[str, dict | None]:
    case = CORPUS[name](True)
    args, kwargs = case.inputs()
    with torch.no_grad():
        compiled = guardjit.compile(case.model, backend="eager")
        compiled(*args, **kwargs)
    unit = plugin.units()[-1]
    return unit.skip_declined, _core.skip_stats(unit.check)


def test_small_unit_declines_and_large_unit_plans():
    why, stats = _plan("mlp")
    assert stats is None and why.startswith("the plan does not pay"), why
    reasons = guardjit.stats()["subtree_skip"]["declined_reasons"]
    assert reasons.get("the plan does not pay", 0) >= 1, reasons
    torch._dynamo.reset()
    plugin.clear_units()
    why, stats = _plan("stack-8")
    assert why == "" and stats is not None
    # The estimates the decision was made on: the skipping check is cheaper.
    assert stats["skip_cost"] <= stats["full_cost"] * 2 / 3, stats


def test_switched_off_the_small_unit_plans(skip_every_plan):
    why, stats = _plan("mlp")
    assert why == "" and stats is not None
    assert stats["skip_cost"] > stats["full_cost"] * 2 / 3, stats
