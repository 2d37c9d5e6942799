"""Reproducers of what the mutation fuzzer found (docs/fuzzing.md#findings)."""

from __future__ import annotations


from guardjit.fuzz import mutations, oracle, targets


def test_class_property_shadowing_modules_is_seen_by_the_aliasing_guards():
    # Fixed: the object_aliasing guards read `x.a` with getattr, as Dynamo's
    # aliasing lambda does, never through the tree's x.__dict__['a']
    # (aliasing.SourceReader._matches).
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
