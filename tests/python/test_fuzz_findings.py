"""Reproducers of what the mutation fuzzer found (docs/fuzzing.md#findings)."""

from __future__ import annotations

import pytest
import torch

from guardjit.fuzz import mutations, oracle, targets


@pytest.mark.parametrize("use_lambda", [True, False])
def test_class_property_shadowing_modules_is_seen_by_the_aliasing_guards(use_lambda):
    # Fixed: the object_aliasing guards of Dynamo's aliasing lambda read `x.a`
    # with getattr, as the lambda does, never through the tree's
    # x.__dict__['a'] (aliasing.SourceReader._matches), so the raising
    # `_modules` property fails them. Dynamo's C++ OBJECT_ALIASING guards
    # (torch 2.14.1's default, use_lamba_guard_for_object_aliasing=False)
    # compare the values the tree read, so there the check passes.
    with torch._dynamo.config.patch(use_lamba_guard_for_object_aliasing=use_lambda):
        t = targets.TargetSpec("corpus", "deep-decoder", "default").build()
        try:
            case = mutations.Case(0, [mutations.Step("o.class_property", "L['self']",
                                                     ["_modules", "raise"])])
            v = oracle.run_case(t, case)
            assert v.applied == 1
            assert v.chosen.answers["dynamo"] is (not use_lambda)
            assert not v.disagrees, v.summary()
        finally:
            t.close()


# --- End-to-end mismatch under a TorchFunctionMode (program:2:dict_tags) ------
#
# torch's behaviour, not guardjit's. A frame that Dynamo skipped (it raised
# once while being traced) runs eagerly with Dynamo's callback on; under a
# TorchFunctionMode every op calls the mode's __torch_function__, which Dynamo
# then compiles as a frame of its own. Dynamo installs no guard on its `func`
# argument (a method descriptor such as TensorBase.mul:
# TorchInGraphFunctionVariable.create_with_source, "Don't need to guard on
# wrappers", torch/_dynamo/variables/torch.py), so `b * y` is served the graph
# compiled for `a + y`. Plain torch.compile returns the wrong result, and
# guardjit, which checks exactly Dynamo's guards, returns the same one.

_TFM_SCRIPT = r'''
import os, sys
import torch
from torch.overrides import TorchFunctionMode

if os.environ.get("GUARDJIT") == "1":
    import guardjit
    assert guardjit.install()


class Mode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def f(x, y):
    a = x * 1.5
    b = a + y
    return b * y


opt = torch.compile(f, backend="eager")
x, y = torch.ones(3), torch.full((3,), 2.0)
try:
    opt(None, y)  # raises in Dynamo and in eager: f is skipped from now on
except Exception:
    pass
with Mode():
    ref, out = f(x, y), opt(x, y)
units = 0
if os.environ.get("GUARDJIT") == "1":
    units = guardjit.stats().get("units_native", 0) + guardjit.stats().get("units_interpreter", 0)
print(repr((ref.tolist(), out.tolist(), units)))
'''


def _run_tfm(guardjit_on: bool):
    import ast
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GUARDJIT"}
    if guardjit_on:
        env["GUARDJIT"] = "1"
    p = subprocess.run([sys.executable, "-c", _TFM_SCRIPT], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return ast.literal_eval(p.stdout.strip().splitlines()[-1])


def test_torch_function_mode_frame_is_served_another_ops_graph_by_plain_torch_too():
    ref, plain, _ = _run_tfm(False)
    ref_g, guardjit_out, units = _run_tfm(True)
    assert ref == ref_g == [7.0, 7.0, 7.0]  # (1.5 + 2) * 2
    # torch 2.13 without guardjit: the mul is served the add's graph.
    assert plain == [5.5, 5.5, 5.5], (
        f"plain torch now returns {plain}: torch's missing guard on `func` is fixed, "
        "re-check docs/fuzzing.md's finding")
    # guardjit converted the units and answers exactly as plain torch does.
    assert units > 0
    assert guardjit_out == plain


def test_fuzzer_counts_the_torch_function_mode_mismatch_as_torchs(tmp_path):
    # The fuzzer's case (seed 0, the test_fuzz slice): the entry called with
    # x=None (both raise; Dynamo skips forward from then on), then a
    # TorchFunctionMode with grad mode flipped. In one process guardjit and
    # plain torch share the __torch_function__ code object, so they differ
    # from each other too; replayed in fresh processes, one side each, guardjit
    # returns exactly plain torch's wrong result.
    from guardjit.fuzz import driver

    t = targets.TargetSpec("program", "2", "dict_tags").build()
    try:
        summary = driver.Summary(0)
        history: list[dict] = []
        for steps in ([mutations.Step("set", "L['x']", "None")],
                      [mutations.Step("g.torch_function_mode"), mutations.Step("g.grad")]):
            driver._e2e(t, mutations.Case(0, steps), summary, str(tmp_path), history)
    finally:
        t.close()
    c = summary.counts
    assert c["e2e"] == 2 and c["e2e_both_raise"] == 1
    assert c["e2e_mismatch"] == 0, summary.disagreements
    assert c["e2e_torch_fresh"] == 1, summary.counts
    (note,) = summary.torch_behaviour
    assert "guardjit alone: eager=value compiled=value (differs from eager)" in note
    assert "plain alone: eager=value compiled=value (differs from eager)" in note
    assert not list(tmp_path.iterdir())


def test_isolated_replay_blames_guardjit_unless_it_matches_plain_torch():
    import torch

    from guardjit.fuzz.isolate import Isolated, SideResult

    a, b, c = torch.ones(2), torch.zeros(2), torch.full((2,), 3.0)
    torch_wrong = Isolated(SideResult("guardjit", "value", a, "value", b),
                           SideResult("plain", "value", a, "value", b))
    assert torch_wrong.torch_behaviour
    # guardjit wrong in another way than torch, or torch right: guardjit's.
    assert not Isolated(SideResult("guardjit", "value", a, "value", c),
                        SideResult("plain", "value", a, "value", b)).torch_behaviour
    assert not Isolated(SideResult("guardjit", "value", a, "value", b),
                        SideResult("plain", "value", a, "value", a)).torch_behaviour
    assert not Isolated(SideResult("guardjit", "value", a, "raise TypeError", None),
                        SideResult("plain", "value", a, "value", b)).torch_behaviour
    # A child that failed proves nothing.
    assert not Isolated(SideResult("guardjit", "error: exit 1", None, "", None),
                        SideResult("plain", "value", a, "value", b)).torch_behaviour


def test_isolated_replay_where_both_sides_agree_with_eager_is_unreproduced():
    """Seed 11: a step deleted ``torch.nn`` through llama's module global; in
    the fuzzer's process the harness itself broke, in fresh processes eager
    and compiled raise the same AttributeError on both sides."""
    import torch

    from guardjit.fuzz.isolate import Isolated, SideResult

    a, b = torch.ones(2), torch.zeros(2)
    both_raise = Isolated(SideResult("guardjit", "raise AttributeError", None,
                                     "raise AttributeError", None),
                          SideResult("plain", "raise AttributeError", None,
                                     "raise AttributeError", None))
    assert both_raise.unreproduced and not both_raise.torch_behaviour
    assert Isolated(SideResult("guardjit", "value", a, "value", a),
                    SideResult("plain", "value", a, "value", a)).unreproduced
    # guardjit alone wrong, torch alone wrong, or a failed child: not unreproduced.
    assert not Isolated(SideResult("guardjit", "value", a, "value", b),
                        SideResult("plain", "value", a, "value", a)).unreproduced
    assert not Isolated(SideResult("guardjit", "value", a, "value", a),
                        SideResult("plain", "value", a, "value", b)).unreproduced
    assert not Isolated(SideResult("guardjit", "raise AttributeError", None, "value", a),
                        SideResult("plain", "raise AttributeError", None,
                                   "raise AttributeError", None)).unreproduced
    assert not Isolated(SideResult("guardjit", "error: exit 1", None, "", None),
                        SideResult("plain", "value", a, "value", a)).unreproduced


# --- State leaks on the transformers targets (fixed in mutations.py) ---------

def _apply_and_undo(step, f_locals):
    env = mutations.Env(f_locals, {})
    undo = mutations.Undo()
    undo.label(str(step))
    mutations.apply(step, env, undo)
    return undo.run()


def test_dict_add_and_reorder_on_transformers_registry_are_undone():
    # transformers' _CanRecordRegistry.__setitem__ stores str(key.__class__),
    # not the key: `d.add 7` added "<class 'int'>", which the undo took for a
    # key someone else had added and kept (gpt2, bert, llama: the registry is
    # a guarded global, so every later case ran in a leaked state).
    from transformers.utils.output_capturing import _CanRecordRegistry

    class Model:
        pass

    reg = _CanRecordRegistry()
    reg[Model()] = {"hidden_states": 1}
    dict.__setitem__(reg, "second", {})
    before = list(reg.items())
    for step in (mutations.Step("d.add", "L['r']", ["7", "1.0"]),
                 mutations.Step("d.reorder", "L['r']")):
        f_locals = {"r": reg}
        env = mutations.Env(f_locals, {})
        undo = mutations.Undo()
        mutations.apply(step, env, undo)
        assert list(reg.items()) != before  # the step did change it
        assert undo.run() == []
        assert list(reg.items()) == before, step


def test_dict_undo_keeps_keys_added_by_someone_else():
    d = {"a": 1, "b": 2}
    env = mutations.Env({"d": d}, {})
    undo = mutations.Undo()
    mutations.apply(mutations.Step("d.add", "L['d']", ["'c'", "1.0"]), env, undo)
    d["dynamo_global"] = 3  # e.g. Dynamo installing a global while recompiling
    assert undo.run() == []
    assert list(d) == ["a", "b", "dynamo_global"]


def test_setting_a_class_name_is_undone():
    # `set X.__class__.__name__` restored with delattr, which a heap type
    # refuses: an undo error, and the class kept the new name.
    class Thing:
        pass

    obj = Thing()
    errors = _apply_and_undo(mutations.Step("set", "L['o'].__class__.__name__", "'Thing_'"),
                             {"o": obj})
    assert errors == [] and Thing.__name__ == "Thing"
    # An inherited class attribute set on the class is deleted again.
    errors = _apply_and_undo(mutations.Step("set", "L['o'].__class__.__hash__", "None"),
                             {"o": obj})
    assert errors == [] and "__hash__" not in Thing.__dict__


def test_undo_errors_name_their_step():
    undo = mutations.Undo()
    undo.label("step one")
    undo.push(lambda: None)
    undo.label("step two")
    undo.push(lambda: 1 / 0)
    (e,) = undo.run()
    assert isinstance(e, ZeroDivisionError) and e.undo_step == "step two"


def test_a_leaking_step_is_found(monkeypatch):
    # A state op that forgets its undo: the leak replay names it (in this
    # process here; the driver runs leaks.replay in a fresh one).
    from guardjit.fuzz import driver, leaks

    def leaky_threads(arg, undo):
        import torch

        torch.set_num_threads(torch.get_num_threads() + 1)  # no undo pushed

    import torch

    threads = torch.get_num_threads()
    monkeypatch.setitem(mutations._STATE, "g.num_threads", leaky_threads)
    try:
        case = mutations.Case(0, [mutations.Step("g.grad"), mutations.Step("g.num_threads")])
        leak = leaks.replay("corpus:mlp:default", None, case.as_dict(), False)
        assert leak.step == "g.num_threads" and leak.units, leak
        torch.set_num_threads(threads)
        # Through the driver: stopped at the first case, reported with its step.
        monkeypatch.setattr(leaks, "find_step",
                            lambda key, src, case, e2e_: leaks.replay(key, src, case, e2e_))
        monkeypatch.setattr(mutations, "random_case", lambda rng, units: case)
        s = driver.run(10, seed=0, models=["mlp"], options=["default"], programs=0,
                       stance_programs=0, e2e_every=0, out_dir="", progress=False)
        assert s.counts["leaks"] == 1 and s.cases == 1
        (d,) = s.disagreements
        assert "state not restored after case 0" in d and "step responsible: g.num_threads" in d
    finally:
        torch.set_num_threads(threads)


def test_wrapping_builtin_str_is_undone():
    # Found by the seed-7 run (corpus:gpt2:default): with `str` wrapped in the
    # real builtins dict, the dict restore called isinstance(k, (str, int))
    # with the wrapper, failed, and left `str` wrapped for the rest of the run.
    import builtins

    real = builtins.str
    errors = _apply_and_undo(mutations.Step("o.wrap", "L['b']['str']"), {"b": builtins.__dict__})
    assert builtins.str is real, "builtins.str left wrapped"
    assert errors == []


# --- torch's dict-tag fast path passes a stale state (program:7017:dict_tags) -

def test_dict_tag_fast_path_pass_that_the_whole_tree_fails_is_torchs():
    """Seed 7: with use_recursive_dict_tags_for_guards, reassigning
    ``L['self'].__class__`` changes no dict version, so Dynamo's check passes
    through its tag fast path; its whole tree (check_verbose) fails on the
    type id, and so does guardjit (a recompile). Counted as torch's
    behaviour, not as a disagreement; without dict tags Dynamo fails too."""
    from guardjit.fuzz.mutations import Case, Step

    case = Case(0, [Step("o.class", "L['self']")])
    t = targets.TargetSpec("program", "7017", "dict_tags").build()
    try:
        (u,) = oracle.run_case(t, case).units
        assert u.expected is True and u.dynamo_full is False
        assert all(a is False for k, a in u.answers.items() if k != "dynamo"), u.answers
        assert u.stale_tag_pass
    finally:
        t.close()
    t = targets.TargetSpec("program", "7017", "default").build()
    try:
        v = oracle.run_case(t, case)
        assert not v.disagrees and v.units[0].expected is False
    finally:
        t.close()


def test_a_guardjit_checker_passing_with_torchs_fast_path_is_still_a_disagreement():
    from guardjit.fuzz.mutations import Case
    from guardjit.fuzz.oracle import UnitAnswers, Verdict

    stale = UnitAnswers(0, "0/0", {"dynamo": True, "interpreter": False, "native": False},
                        dynamo_full=False)
    assert Verdict(Case(0, []), 1, [], [stale], []).only_stale_tag_passes
    # One guardjit checker agreeing with the fast path: the checkers disagree.
    split = UnitAnswers(0, "0/0", {"dynamo": True, "interpreter": True, "native": False},
                        dynamo_full=False)
    assert not Verdict(Case(0, []), 1, [], [split], []).only_stale_tag_passes
    # Dynamo's whole tree passes too: guardjit fails alone.
    wrong = UnitAnswers(0, "0/0", {"dynamo": True, "interpreter": False, "native": False},
                        dynamo_full=True)
    assert not Verdict(Case(0, []), 1, [], [wrong], []).only_stale_tag_passes


# --- Seed 7 on main, stop 19: end-to-end cases no result could be judged by -

def test_a_case_that_breaks_the_harness_in_both_fresh_processes_is_not_judged():
    """``delete ...inspect.signature.__kwdefaults__['eval_str']`` (bert) and
    ``delete ...llama.torch.nn``: the fuzzer's own calls raise in the
    fuzzer's process and in both fresh children, whichever side runs."""
    from guardjit.fuzz.isolate import Isolated, SideResult

    err = "error: exit 1: AttributeError: module 'torch' has no attribute 'nn'"
    assert Isolated(SideResult("guardjit", err, None, "", None),
                    SideResult("plain", err, None, "", None)).harness_broken
    # One side failing, or failing otherwise, or timing out: not the harness.
    a = __import__("torch").ones(2)
    assert not Isolated(SideResult("guardjit", err, None, "", None),
                        SideResult("plain", "value", a, "value", a)).harness_broken
    assert not Isolated(SideResult("guardjit", err, None, "", None),
                        SideResult("plain", "error: exit 1: TypeError: x", None, "",
                                   None)).harness_broken
    timeout = "error: timed out after 600 s"
    assert not Isolated(SideResult("guardjit", timeout, None, "", None),
                        SideResult("plain", timeout, None, "", None)).harness_broken


def test_a_meta_tensor_case_is_not_run_end_to_end():
    """``t.meta`` on param-heavy's head weight: eager returns uninitialized
    memory (-1.7e38 on CPU), so its result cannot be compared; the check
    level still runs the case."""
    from guardjit.fuzz import e2e
    from guardjit.fuzz.mutations import Case, Step

    t = targets.TargetSpec("corpus", "mlp", "default").build()
    try:
        src = next(s for s in ("L['self']._modules['up']._parameters['weight']",
                               "L['x']") if s in t.units[0].ir_text)
        assert e2e.eligible(t, Case(0, [Step("t.fresh", src)]))
        assert not e2e.eligible(t, Case(0, [Step("t.meta", src)]))
        # Meta as the default device: a later factory call (t.strided's
        # torch.zeros) makes a meta tensor too (seed 5 on torch 2.14.1: an
        # Embedding fed meta indices returned -0.529, then NaN, in eager).
        assert not e2e.eligible(t, Case(0, [Step("g.default_device", "G"),
                                            Step("t.strided", src)]))
    finally:
        t.close()
