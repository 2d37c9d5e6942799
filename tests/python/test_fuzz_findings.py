"""Reproducers of what the mutation fuzzer found (docs/fuzzing.md#findings)."""

from __future__ import annotations

import pytest

from guardjit.fuzz import mutations, oracle, targets


@pytest.mark.xfail(strict=True, reason="open: object_aliasing reads attributes through __dict__, "
                                       "Dynamo's aliasing lambda through getattr (a class-level "
                                       "property shadows the instance dict)")
def test_class_property_shadowing_modules_is_seen_by_the_aliasing_guards():
    t = targets.TargetSpec("corpus", "deep-decoder", "default").build()
    try:
        case = mutations.Case(0, [mutations.Step("o.class_property", "L['self']",
                                                 ["_modules", "raise"])])
        v = oracle.run_case(t, case)
        assert v.applied == 1
        assert v.chosen.answers["dynamo"] is False
        assert not v.disagrees, v.summary()
    finally:
        t.close()
