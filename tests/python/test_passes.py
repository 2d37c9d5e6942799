"""_core.run_pipeline on live recorded sets: the default pipeline keeps the
interpreter's answers, reports per-pass removals, and a bad pipeline raises
with the column at fault."""

from __future__ import annotations

import pytest
import torch

import guardjit
from guardjit import _core, models, plugin


def _record(monkeypatch, pipeline: str):
    """Compiles the CNN; runs `pipeline` on each set right before binding.
    Returns (set as recorded, set after the pipeline, stats, frame locals)."""
    orig_bind = _core.bind
    seen = []

    def bind(ir):
        if seen:  # the unit's differentiating set, bound after it (stance.py)
            return orig_bind(ir)
        before = ir.copy()
        seen.append((before, ir, _core.run_pipeline(ir, pipeline)))
        return orig_bind(ir)

    monkeypatch.setattr(plugin._core, "bind", bind)
    # The set as recorded: the plugin's own pipeline off.
    monkeypatch.setattr(plugin.config, "pipeline", "")
    case = models.cnn()
    guardjit.compile(case.model, backend="eager")(*case.make_input())
    units = plugin.units()
    assert len(seen) == len(units) == 1
    return (*seen[0], units[0].f_locals)


def test_default_pipeline_keeps_answers(monkeypatch):
    before, after, stats, f_locals = _record(monkeypatch, "default")
    assert stats["pipeline"] == "cse,dedup,fold-implied,dead-values,order"
    assert [p["name"] for p in stats["passes"]] == stats["pipeline"].split(",")
    assert stats["guards_in"] == before.num_guards
    assert stats["guards_out"] == after.num_guards
    removed = sum(n for p in stats["passes"] for n in p["guards_removed"].values())
    assert stats["guards_in"] - stats["guards_out"] == removed
    # The live objects prove TYPE_MATCHes implied by TENSOR_MATCH / ID_MATCH.
    fold = next(p for p in stats["passes"] if p["name"] == "fold-implied")
    assert fold["guards_removed"].get("TYPE_MATCH", 0) > 0
    b, a = _core.bind(before), _core.bind(after)
    x = f_locals["x"]
    variants = [dict(f_locals), {**f_locals, "x": x.double()}, {**f_locals, "x": x[:1]},
                {k: v for k, v in f_locals.items() if k != "x"}]
    answers = [b.interpret(v) for v in variants]
    assert answers == [True, False, False, False]
    assert [a.interpret(v) for v in variants] == answers
    model = f_locals["self"]
    model.train(not model.training)
    try:
        assert b.interpret(dict(f_locals)) is False
        assert a.interpret(dict(f_locals)) is False
    finally:
        model.train(not model.training)


def test_filter_then_default(monkeypatch):
    _, after, stats, f_locals = _record(
        monkeypatch, "skip_guard_on_all_nn_modules_unsafe,default")
    assert stats["passes"][0]["name"] == "skip_guard_on_all_nn_modules_unsafe"
    assert stats["guards_out"] < stats["guards_in"]
    a = _core.bind(after)
    assert a.interpret(dict(f_locals))
    # The module's guards are gone: a flipped training flag is not checked.
    model = f_locals["self"]
    model.train(not model.training)
    try:
        assert a.interpret(dict(f_locals))
    finally:
        model.train(not model.training)


def test_bad_pipeline_raises_with_column():
    s = _core.GuardSet("s")
    with pytest.raises(ValueError, match="column 5: unknown pass name 'nope'"):
        _core.run_pipeline(s, "cse,nope")
    with pytest.raises(ValueError, match="must come before the structural passes"):
        _core.run_pipeline(s, "dedup,skip_all_guards_unsafe")
