"""``guardjit.compile(model, options={"guard_filter_fn": f})`` honours any
torch-style guard filter exactly as torch does.

guardjit passes the option through to ``torch.compile``: Dynamo calls ``f``
with its own ``GuardFilterEntry`` list, rebuilds the tree with the kept guards
(CheckFunctionManager.__init__, torch/_dynamo/guards.py), and guardjit
records and compiles that filtered tree. So the kept set is torch's by
construction; these tests check that it stays so: ``f`` sees torch's real
entries, the compiled check agrees with Dynamo's filtered tree on mutated
inputs, outputs and recompile counts equal plain ``torch.compile``'s, and the
guards torch never lets a filter drop stay.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.types import GuardFilterEntry
from torch._dynamo.utils import counters

import guardjit
from guardjit import models, plugin
from guardjit.lab import demo

SIX = (
    "skip_guard_on_inbuilt_nn_modules_unsafe",
    "skip_guard_on_all_nn_modules_unsafe",
    "keep_tensor_guards_unsafe",
    "keep_portable_guards_unsafe",
    "skip_guard_on_globals_unsafe",
    "skip_all_guards_unsafe",
)


class Recording:
    """A user filter: keeps guards by a rule and remembers what it was given."""

    def __init__(self, rule):
        self.rule = rule
        self.calls: list[list[GuardFilterEntry]] = []

    def __call__(self, entries):
        self.calls.append(list(entries))
        return [bool(self.rule(e)) for e in entries]


def _no_module_floats(e: GuardFilterEntry) -> bool:
    """Drops the guards on float attributes (a typical user filter)."""
    return not (e.has_value and type(e.value) is float)


def _entry_key(e: GuardFilterEntry) -> tuple:
    return (e.guard_type, e.name, e.has_value, e.derived_guard_types, e.is_global)


def _run(compile_fn, case, f, plan):
    """Compiles ``case.model`` with ``compile_fn`` and filter ``f``, runs the
    plan's inputs; returns (outputs, frames compiled, units)."""
    torch._dynamo.reset()
    plugin.clear_units()
    counters.clear()
    compiled = compile_fn(case.model, backend="eager", options={"guard_filter_fn": f})
    outs = []
    for label, mutate in plan:
        torch.manual_seed(0)
        args = case.make_input()
        undo = lambda: None  # noqa: E731
        if mutate is not None:
            args, undo = mutate(case.model, args)
        try:
            outs.append((label, compiled(*args)))
        finally:
            undo()
    return outs, counters["stats"]["unique_graphs"], plugin.units()


# Mutations of two_input_mlp the model still runs on (recompiling or not).
RUNNABLE = ("same values (fresh tensor)", "non-contiguous stride", "requires_grad flip",
            "train mode", "aliased inputs (x is y)", "module float attribute (gate)")


def _both_batch_5(model, args):
    return tuple(torch.cat([a, a[:1]], 0) for a in args), lambda: None


def _plan(case):
    return ([("original", None)] + [(k, case.mutations[k]) for k in RUNNABLE]
            + [("batch 5 (both inputs)", _both_batch_5), ("original again", None)])


@pytest.mark.parametrize("rule", [_no_module_floats, lambda e: e.guard_type != "ID_MATCH"],
                         ids=["no-floats", "no-id-match"])
def test_user_filter_sees_torch_entries_and_matches_torch(rule):
    case = models.two_input_mlp()
    plan = _plan(case)
    f_torch, f_gj = Recording(rule), Recording(rule)
    outs_t, graphs_t, _ = _run(torch.compile, case, f_torch, plan)
    outs_g, graphs_g, units = _run(guardjit.compile, case, f_gj, plan)
    # f gets torch's own entries, the same ones with and without guardjit.
    assert f_gj.calls and all(isinstance(e, GuardFilterEntry) for c in f_gj.calls for e in c)
    assert [[_entry_key(e) for e in c] for c in f_gj.calls] == \
        [[_entry_key(e) for e in c] for c in f_torch.calls]
    # Same recompiles, same outputs.
    assert graphs_g == graphs_t
    for (la, a), (lb, b) in zip(outs_t, outs_g):
        assert la == lb
        torch.testing.assert_close(a, b)
    assert units and all(u.status == "native" for u in units), [u.reason for u in units]


def _agreement(case, units, plan):
    """(label, Dynamo's answer, guardjit's answers) for every plan input."""
    rows = []
    for label, mutate in plan:
        args = case.make_input()
        undo = lambda: None  # noqa: E731
        if mutate is not None:
            args, undo = mutate(case.model, args)
        try:
            for u in units:
                fl = demo._frame_locals_for(u, args)
                rows.append((label, u.dynamo_root.check(fl),
                             (u.native_root.check(fl), u.check(fl), u.bound.interpret(fl))))
        finally:
            undo()
    return rows


AGREEMENT = [(m, n) for m in ("cnn", "two-input-mlp") for n in SIX + ("user:no-floats",)] + [
    pytest.param("transformer", n, marks=pytest.mark.slow)
    for n in SIX + ("user:no-floats",)]


@pytest.mark.parametrize(("model", "name"), AGREEMENT)
def test_filtered_tree_agrees_under_mutations(model, name):
    case = models.DEFAULT_MODELS[model]()
    f = (Recording(_no_module_floats) if name.startswith("user:")
         else getattr(torch.compiler, name))
    guardjit.compile(case.model, backend="eager", options={"guard_filter_fn": f})(
        *case.make_input())
    units = plugin.units()
    assert units and all(u.status == "native" for u in units), [u.reason for u in units]
    rows = _agreement(case, units, [("original", None)] + list(case.mutations.items()))
    bad = [r for r in rows if r[2] != (r[1],) * 3]
    assert not bad
    # The filtered tree still rejects something unless every guard is gone.
    if name != "skip_all_guards_unsafe":
        assert any(not r[1] for r in rows)
    else:
        assert all(r[1] for r in rows)
        assert all(u.ir.num_guards == 0 for u in units)


def test_guards_no_filter_can_drop_stay():
    """NO_TENSOR_ALIASING is installed after filtering over the kept
    TENSOR_MATCH guards (compile_check_fn): a filter keeping only tensor
    guards still rejects aliased inputs, in Dynamo's tree and in guardjit."""
    case = models.two_input_mlp()
    seen = Recording(lambda e: e.guard_type == "TENSOR_MATCH")
    guardjit.compile(case.model, backend="eager", options={"guard_filter_fn": seen})(
        *case.make_input())
    (unit,) = plugin.units()
    kinds = unit.ir.count_by_kind()
    assert kinds.get("NO_TENSOR_ALIASING") == 1
    # No filter entry names it: it is not a Dynamo guard a filter can see.
    assert all(e.guard_type != "NO_TENSOR_ALIASING" for c in seen.calls for e in c)
    x, _ = case.make_input()
    fl = dict(unit.f_locals, x=x, y=x)
    assert unit.dynamo_root.check(fl) is False
    assert (unit.native_root.check(fl), unit.check(fl), unit.bound.interpret(fl)) == (False,) * 3


@pytest.mark.parametrize("name", SIX)
def test_named_filters_are_torch_functions_passed_through(name):
    """The six named filters are torch's functions, given to torch unchanged;
    the unit guardjit compiles has exactly Dynamo's filtered leaf guards."""
    case = models.two_input_mlp()
    calls = []
    fn = getattr(torch.compiler, name)

    def spy(entries):
        calls.append(len(entries))
        return fn(entries)

    guardjit.compile(case.model, backend="eager", options={"guard_filter_fn": spy})(
        *case.make_input())
    (unit,) = plugin.units()
    assert calls, "torch did not call the filter"
    # Native means the recorded IR has exactly the leaf guards of Dynamo's
    # filtered tree, per kind (plugin._convert checks it).
    assert unit.status == "native", unit.reason
    torch._dynamo.reset()
    plugin.clear_units()
    guardjit.compile(case.model, backend="eager")(*case.make_input())
    (full,) = plugin.units()
    assert unit.guards < full.guards
    assert (unit.guards == 0) == (name == "skip_all_guards_unsafe")


def test_options_dict_consumed_as_torch_does():
    """torch.compile pops guard_filter_fn from the options dict it is given
    (torch/__init__.py), so a dict reused for a second compile gives that
    compile no filter. guardjit.compile passes the dict through and leaves
    it exactly as torch.compile does; a test comparing the two must give
    each compile its own dict (test_subtree_skip.py once did not, and plain
    torch ran unfiltered)."""
    after = {}
    for name, compile_fn in (("torch", torch.compile), ("guardjit", guardjit.compile)):
        options = {"guard_filter_fn": torch.compiler.skip_all_guards_unsafe}
        compile_fn(torch.nn.Linear(2, 2), backend="eager", options=options)
        after[name] = dict(options)
    assert after["guardjit"] == after["torch"] == {}
