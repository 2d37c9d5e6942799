"""guardjit's check agrees with Dynamo's RootGuardManager.check on real models.

For every built-in model and every mutation scenario, Dynamo's original tree,
the replacement root (native code) and the interpreter must give the same
answer on the same frame locals.
"""

from __future__ import annotations

import pytest
import torch

import guardjit
from guardjit import demo, models

CASES = sorted(models.DEFAULT_MODELS)


def _scenarios():
    for name in CASES:
        for mutation in models.DEFAULT_MODELS[name]().mutations:
            yield name, mutation


def test_at_least_30_scenarios_over_3_models():
    scenarios = list(_scenarios())
    assert len({m for m, _ in scenarios}) >= 3
    assert len(scenarios) >= 30


@pytest.fixture(scope="module")
def compiled_cases():
    """Each model compiled once with guardjit; its units kept."""
    from guardjit import plugin

    out = {}
    for name in CASES:
        torch._dynamo.reset()
        plugin.clear_units()
        plugin.config.keep_units = plugin.config.keep_frame_locals = True
        case = models.DEFAULT_MODELS[name]()
        compiled = guardjit.compile(case.model, backend="eager")
        with torch.no_grad():
            compiled(*case.make_input())
        out[name] = (case, plugin.units())
    return out


@pytest.mark.parametrize("name", CASES)
def test_every_unit_is_native(compiled_cases, name):
    case, units = compiled_cases[name]
    assert units, "no compile unit was seen"
    for u in units:
        assert u.status == "native", u.reason
        assert u.guards > 20
        assert u.native is not None


@pytest.mark.parametrize("name,mutation", list(_scenarios()))
def test_mutation_agrees_with_dynamo(compiled_cases, name, mutation):
    case, units = compiled_cases[name]
    args, undo = case.mutations[mutation](case.model, case.make_input())
    try:
        for u in units:
            f_locals = demo._frame_locals_for(u, args)
            expected = u.dynamo_root.check(f_locals)
            assert u.native_root.check(f_locals) == expected
            assert u.bound.interpret(f_locals) == expected
            assert u.check(f_locals) == expected
    finally:
        undo()


@pytest.mark.parametrize("name", CASES)
def test_mutations_are_meaningful(compiled_cases, name):
    """Dynamo accepts the unmutated input and rejects most mutations: the
    agreement test above therefore exercises both answers."""
    case, units = compiled_cases[name]
    rejected = 0
    for mutation, mutate in case.mutations.items():
        args, undo = mutate(case.model, case.make_input())
        try:
            if not all(u.dynamo_root.check(demo._frame_locals_for(u, args)) for u in units):
                rejected += 1
        finally:
            undo()
    assert rejected >= len(case.mutations) // 2
    args = case.make_input()
    assert all(u.dynamo_root.check(demo._frame_locals_for(u, args)) for u in units)
