"""_core.diffsets on sets recorded from real torch: the contract the plugin
relies on (same order, None stays None, new copies, stats keys, ValueError),
and the routing condition on the warm-up inputs of the issue's example, for
every policy, checked with the interpreter against the full recorded sets.
The stance itself (torch's lookup with the reduced roots) is the plugin's
and is tested there."""

from __future__ import annotations

import pytest
import torch

import guardjit
from guardjit import _core, plugin

POLICIES = ["torch-compatible", "minimal", "guarded-minimal"]
KEYS = {"guards_in", "guards_out", "seed", "by_contradiction", "by_difference",
        "by_opaque", "exact"}


def fn(x, a=None, b=None):
    x = x * 3
    if a:
        x = x * 5
    if b:
        x = x * 7
    return x


def _warm():
    """Three units of fn, in cache order (newest first), and the warm-ups."""
    opt = guardjit.compile(fn, backend="eager")
    x = torch.ones(4)
    warm = [dict(x=x, a=None, b=None), dict(x=x, a=1, b=None), dict(x=x, a=1, b=1)]
    for kw in warm:
        opt(**kw)
    sets = [u.recorded_ir for u in plugin.units()]
    assert len(sets) == 3 and all(s is not None for s in sets)
    return sets[::-1], warm


@pytest.mark.parametrize("policy", POLICIES)
def test_reduced_sets_route_every_warm_up(policy):
    sets, warm = _warm()
    printed = [s.print() for s in sets]
    r = _core.diffsets(sets, policy)
    assert [s.print() for s in sets] == printed  # inputs unchanged
    assert [s.name for s in r["sets"]] == [s.name for s in sets]
    assert all(a is not b for a, b in zip(r["sets"], sets))
    for u, s in zip(r["units"], sets):
        assert set(u) == KEYS
        assert u["guards_in"] == s.num_guards
        assert u["by_contradiction"] + u["by_difference"] == 2
        assert u["exact"] is True
    # Extra inputs no unit was warmed with must not be served by a wrong
    # unit either when some full set accepts them.
    inputs = warm + [dict(x=torch.ones(4), a=2, b=None), dict(x=torch.ones(4), a=None, b=1)]
    full = [_core.bind(s) for s in sets]
    reduced = [_core.bind(s) for s in r["sets"]]
    served = 0
    for kw in inputs:
        f = [b.interpret(dict(kw)) for b in full]
        if any(f):
            served += 1
            assert [b.interpret(dict(kw)) for b in reduced] == f, kw
    assert served >= len(warm)
    if policy == "minimal":
        assert [u["guards_out"] for u in r["units"]] == [1, 2, 1]


def test_opaque_units_and_errors():
    sets, _ = _warm()
    r = _core.diffsets([sets[0], None, sets[2]], "minimal")
    assert r["sets"][1] is None
    assert r["units"][0]["by_opaque"] == 1
    assert r["units"][0]["guards_out"] == sets[0].num_guards
    assert _core.diffsets([]) == {"sets": [], "units": []}
    with pytest.raises(ValueError, match="unknown diffset policy 'fast'"):
        _core.diffsets(sets, "fast")
