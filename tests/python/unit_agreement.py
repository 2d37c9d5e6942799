"""Shared by the kind tests: a recorded unit answers as Dynamo's own tree."""

from __future__ import annotations


def agree(units, variants):
    """Dynamo's tree, guardjit's native root and callable and its interpreter
    on each variant of each unit's compile-time frame locals: ``(label,
    change)`` with ``change`` a dict of frame-local changes or a function of
    the frame locals returning one. Returns Dynamo's answers."""
    answers = []
    for u in units:
        for label, change in variants:
            f_locals = dict(u.f_locals)
            f_locals.update(change(f_locals) if callable(change) else change)
            expected = u.dynamo_root.check(f_locals)
            got = (u.native_root.check(f_locals), u.check(f_locals),
                   u.bound.interpret(f_locals))
            assert got == (expected,) * 3, f"{label}: dynamo={expected} got={got}"
            answers.append(expected)
    return answers
