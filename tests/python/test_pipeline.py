"""The plugin's pass pipeline: every pass keeps the check's answer.

The plugin runs ``config.pipeline`` (default ``"default"``) on each recorded
set before binding and the JIT. Differential test: for each structural pass
alone and for the default pipeline, the JIT-compiled check, the interpreter
and Dynamo's own tree give the same answer on the compile-time frame locals
and on mutated ones (issue 4, "Done when").
"""

from __future__ import annotations

import pytest
import torch

import guardjit
from guardjit import _core, models, plugin
from guardjit.lab import demo

STRUCTURAL = ("cse", "dedup", "fold-implied", "dead-values", "order")


def _units(case):
    guardjit.compile(case.model, backend="eager")(*case.make_input())
    units = plugin.units()
    assert units and all(u.status == "native" for u in units), [u.reason for u in units]
    return units


def test_plugin_runs_default_pipeline_and_records_stats():
    before = guardjit.stats()
    case = models.cnn()
    (unit,) = _units(case)
    names = [p["pass"] for p in unit.pipeline_stats]
    assert names == list(STRUCTURAL)
    first, last = unit.pipeline_stats[0], unit.pipeline_stats[-1]
    assert first["guards_before"] == unit.recorded_ir.num_guards
    assert last["guards_after"] == unit.ir.num_guards
    assert last["values_after"] == unit.ir.num_values
    # The recorded set is kept unchanged beside the optimized one.
    assert unit.ir is not unit.recorded_ir
    assert first["values_before"] == unit.recorded_ir.num_values
    for a, b in zip(unit.pipeline_stats, unit.pipeline_stats[1:]):
        assert (a["guards_after"], a["values_after"]) == (b["guards_before"], b["values_before"])
    after = guardjit.stats()
    assert after["pipeline"] == "default"
    assert after["pipeline_sets"] == before["pipeline_sets"] + 1
    assert (after["pipeline_guards_in"] - before["pipeline_guards_in"]
            == unit.recorded_ir.num_guards)
    assert set(after["passes"]) >= set(STRUCTURAL)


def test_empty_pipeline_disables_and_env_var_sets_it(monkeypatch):
    monkeypatch.setattr(plugin.config, "pipeline", "")
    (unit,) = _units(models.two_input_mlp())
    assert unit.pipeline_stats == [] and unit.ir is unit.recorded_ir
    monkeypatch.setenv("GUARDJIT_PIPELINE", "dedup,order")
    assert plugin.Config().pipeline == "dedup,order"


def test_bad_pipeline_falls_back_with_reason(monkeypatch):
    monkeypatch.setattr(plugin.config, "pipeline", "dedup,no-such-pass")
    case = models.two_input_mlp()
    compiled = guardjit.compile(case.model, backend="eager")
    x, y = case.make_input()
    torch.testing.assert_close(compiled(x, y), case.model(x, y))
    (unit,) = plugin.units()
    assert unit.status == "dynamo" and "no-such-pass" in unit.reason


def _plan(case):
    return [("original", None)] + list(case.mutations.items())


@pytest.mark.parametrize("model", ["cnn", "two-input-mlp",
                                   pytest.param("transformer", marks=pytest.mark.slow)])
def test_jit_agrees_with_interpreter_and_dynamo_after_every_pass(model):
    case = models.DEFAULT_MODELS[model]()
    units = _units(case)
    variants = []  # (pipeline, unit, jit check, interpreter)
    for u in units:
        for pipeline in STRUCTURAL + ("default",):
            ir = u.recorded_ir.copy()
            _core.run_pipeline(ir, pipeline)
            bound = _core.bind(ir)
            variants.append((pipeline, u, _core.make_guard(bound, _core.compile(bound)),
                             bound.interpret))
    bad, answers = [], []
    for label, mutate in _plan(case):
        args = case.make_input()
        undo = lambda: None  # noqa: E731
        if mutate is not None:
            args, undo = mutate(case.model, args)
        try:
            for pipeline, u, jit, interp in variants:
                fl = demo._frame_locals_for(u, args)
                want = u.dynamo_root.check(fl)
                got = (jit(fl), interp(fl))
                answers.append(want)
                if got != (want, want):
                    bad.append((label, pipeline, want, got))
        finally:
            undo()
    assert not bad
    # Not vacuous: the scenarios must make the check both pass and fail.
    assert True in answers and False in answers


def test_registered_passes_name_torch_filters_as_torch_does():
    """``_core.registered_passes()`` is Passes.def: its torch filters are
    exactly the ``*_unsafe`` guard filters ``torch.compiler`` exports."""
    entries = _core.registered_passes()
    names = [e["name"] for e in entries]
    assert len(names) == len(set(names))
    assert set(STRUCTURAL) <= set(names)
    filters = {e["name"] for e in entries if e["torch_filter"]}
    exported = {n for n in dir(torch.compiler)
                if n.endswith("_unsafe") and n.startswith(("skip_", "keep_"))
                and n != "skip_guard_eval_unsafe"}
    assert filters == exported
    (default,) = [e for e in entries if e["name"] == "default"]
    assert default["kind"] == "pipeline"
    assert default["params"].split(",") == list(STRUCTURAL)
