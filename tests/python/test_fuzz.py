"""The mutation fuzzer (guardjit.fuzz): a fixed-seed slice finds no
disagreement, and a deliberately wrong checker is caught and saved as a
minimal reproducer that replays."""

from __future__ import annotations

import random
import types

import pytest
import torch

from guardjit import _core
from guardjit.fuzz import driver, mutations, oracle, reproducer, stance_oracle, targets
from guardjit.lab import routing


def test_fixed_seed_slice_agrees(tmp_path):
    s = driver.run(1600, seed=0, models=["mlp"],
                   options=["default", "dict_tags", "install_free_tensors",
                            "skip_guard_on_all_nn_modules_unsafe", "multi_entry"],
                   programs=5, stance_programs=1, stance_share=0.05, e2e_every=7,
                   out_dir=str(tmp_path), progress=False)
    c = s.counts
    assert c["check_disagree"] == 0 and c["stance_misroute"] == 0, s.disagreements[:5]
    assert c["e2e_mismatch"] == 0, s.disagreements[:5]
    # Every difference from eager put down to torch was shown in fresh
    # processes: plain torch alone is wrong, and guardjit alone returns
    # exactly plain torch's result (test_fuzz_findings.py).
    assert len(s.torch_behaviour) == c["e2e_torch_fresh"]
    assert all("(differs from eager); plain alone" in d for d in s.torch_behaviour), \
        s.torch_behaviour
    assert not s.build_errors, s.build_errors
    assert c["leaks"] == 0 and c["undo_errors"] == 0
    assert s.cases == 1600
    # The mutations reach the guards: Dynamo rejects most cases and passes some.
    assert c["dynamo_fail"] > c["unit_checks"] // 2
    assert c["dynamo_pass"] > 50
    assert c["e2e"] >= 5 and c["stance"] >= 60
    assert all(p.name.startswith("e2e-") for p in tmp_path.iterdir())
    # Every op family is drawn.
    families = {op.split(".")[0] for op in s.ops}
    assert {"t", "m", "o", "g", "set", "delete"} <= families, families


def test_cases_across_tier_swaps_agree(tmp_path):
    """--tier-swaps: every unit also answers through a fresh interpreter-first
    callable whose light and O1 code land from the background thread between
    and during the cases; it agrees with Dynamo on every case, calls ran on
    the interpreter and on swapped-in code, swaps landed between two calls of
    one callable, and no new code was distrusted on its first call."""
    s = driver.run(240, seed=3, models=["mlp"], options=["default", "multi_entry"],
                   programs=2, stance_programs=0, stance_share=0.0, e2e_every=0,
                   out_dir=str(tmp_path), progress=False, tier_swaps=True, swap_batch=4)
    c = s.counts
    assert s.cases == 240 and not s.build_errors, s.build_errors
    assert c["check_disagree"] == 0 and c["swap_distrusted"] == 0, s.disagreements[:5]
    assert c["swap_callables"] >= 4
    assert c["swap_calls_interpreter"] and c["swap_calls_light"] + c["swap_calls_O1"], dict(c)
    # When a background swap lands is the machine's business: on a loaded
    # machine (CI beside a benchmark) most land before or after a callable's
    # calls, so one observed swap is what the run can promise.
    assert c["swaps_observed"] >= 1, dict(c)
    assert "tier swaps:" in s.text()


def _without_globals(unit: targets.CheckUnit):
    """A real native check with every global guard dropped (torch's
    skip_guard_on_globals_unsafe filter as a guardjit pass): wrong on purpose."""
    ir = unit.ir.copy()
    _core.run_pipeline(ir, "skip_guard_on_globals_unsafe,default")
    bound = _core.bind(ir)
    return _core.make_guard(bound, _core.compile(bound))


def test_a_wrong_checker_is_caught_and_reproduced(tmp_path):
    wrong: dict[tuple, object] = {}

    def override(i, checkers):
        return checkers  # replaced per target below

    # Programs read module globals (SCALE, CFG, helper, ...).
    specs = [targets.TargetSpec("program", str(n), "default") for n in (1, 3, 5)]
    caught = 0
    for spec in specs:
        t = spec.build()
        try:
            bad = {i: _without_globals(u) for i, u in enumerate(t.units)}

            def override(i, checkers, bad=bad):  # noqa: F811
                return {**checkers, "native": bad[i]}

            for k in range(300):
                case = mutations.random_case(random.Random(f"wrong:{spec.key}:{k}"), t.units)
                v = oracle.run_case(t, case, override)
                if v.disagrees:
                    caught += 1
                    ua = next(u for u in v.units if u.disagrees)
                    # Only the wrong checker differs; the interpreter and root agree with Dynamo.
                    assert ua.answers["native"] is True and ua.answers["dynamo"] is False
                    assert ua.answers["interpreter"] == ua.answers["root"] == ua.answers["dynamo"]
                    assert any(s.source.startswith("G") for s in case.steps)
        finally:
            t.close()
    assert caught >= 5

    # Through the driver: minimized and written as a reproducer.
    def make_override():
        cache: dict[int, object] = {}

        def ov(i, checkers):
            return {**checkers, "native": cache[i]}
        return cache, ov

    cache, ov = make_override()
    spec = specs[0]
    t = spec.build()
    try:
        for i, u in enumerate(t.units):
            cache[i] = _without_globals(u)
        summary = driver.Summary(0)
        found = None
        for k in range(300):
            case = mutations.random_case(random.Random(f"wrong:{spec.key}:{k}"), t.units)
            v = oracle.run_case(t, case, ov)
            if v.disagrees and len(case.steps) > 1:
                found = case
                driver._save_check(t, case, v, summary, str(tmp_path), ov, True)
                break
        assert found is not None
        assert len(summary.reproducers) == 1
        path = summary.reproducers[0]
        with open(path) as f:
            text = f.read()
        assert "native=True" in text and "dynamo=False" in text
        ns: dict = {"__name__": "x"}
        exec(compile(text, path, "exec"), ns)
        # Minimized: every remaining step is needed.
        kept = mutations.Case.from_dict(ns["DATA"]["case"])
        assert len(kept.steps) < len(found.steps) or len(kept.steps) == 1
        for j in range(len(kept.steps)):
            fewer = mutations.Case(kept.unit, kept.steps[:j] + kept.steps[j + 1:])
            assert not fewer.steps or not oracle.run_case(t, fewer, ov).disagrees
    finally:
        t.close()
    # Replayed without the wrong checker, guardjit's real checks agree.
    assert reproducer.replay_main(ns["DATA"]) == 0


def test_always_true_checker_is_caught():
    t = targets.TargetSpec("corpus", "mlp", "default").build()
    try:
        ov = lambda i, c: {**c, "interpreter": lambda fl: True}  # noqa: E731
        n = sum(oracle.run_case(t, mutations.random_case(random.Random(k), t.units), ov).disagrees
                for k in range(100))
        assert n > 30
    finally:
        t.close()


@pytest.mark.parametrize("step,passes", [
    (mutations.Step("m.to", "L['self']", "float64"), False),
    (mutations.Step("d.reorder", "L['self']._modules"), True),  # key order is not guarded here
    (mutations.Step("o.class", "L['self']._modules['a']"), False),
    (mutations.Step("o.class_property", "L['self']._modules['a']", ["in_features", "raise"]),
     True),
    (mutations.Step("delete", "L['self'].gate"), False),
    (mutations.Step("g.inference_mode"), False),
    (mutations.Step("t.requires_grad", "L['x']"), False),
])
def test_each_mutation_is_undone(step, passes):
    t = targets.TargetSpec("corpus", "mlp", "default").build()
    try:
        v = oracle.run_case(t, mutations.Case(0, [step]))
        assert v.applied == 1, v.skipped
        assert not v.disagrees, v.summary()
        assert v.chosen.expected is passes
        assert not v.undo_errors and not oracle.base_ok(t)
    finally:
        t.close()


# --- subtree skipping (docs/subtree-skipping.md), on by default -------------

def test_cases_go_through_subtree_skipping(tmp_path):
    """Each case first checks the installed root twice on the unmutated frame
    locals (a snapshot recorded, then answered from it), so the mutated state
    meets validation and the residual check: answers from the residual
    (rejections among them) and fallbacks to the full check both occur, and
    no checker disagrees with Dynamo."""
    s = driver.run(200, seed=3, models=["mlp"], options=["default", "dict_tags"], programs=0,
                   stance_programs=0, e2e_every=0, out_dir=str(tmp_path), progress=False)
    c, sk = s.counts, s.skip_dict()
    assert c["check_disagree"] == 0 and c["leaks"] == 0, s.disagreements[:5]
    assert sk["source"] == "guardjit default" and sk["units"] == 2, sk
    assert sk["hits"] > 20 and sk["hits_rejected"] > 10 and sk["fallbacks"] > 20, sk
    assert sk["full"] == 0 and sk["units_disabled"] == 0 and sk["record_failures"] == 0, sk
    # One check of each planned unit per case, each through the skip path.
    assert sk["hits"] + sk["fallbacks"] + sk["full"] == c["unit_checks"] == 200
    assert "subtree skipping (guardjit default): 2 units with a plan" in s.text()


@pytest.mark.parametrize("step,path", [
    # No dict, type or pointer the validation reads changes: the residual answers.
    (mutations.Step("t.requires_grad", "L['self']._modules['a']._parameters['weight']"), "hit"),
    (mutations.Step("m.to", "L['self']", "float64"), "hit"),
    (mutations.Step("g.inference_mode"), "hit"),
    # A recorded type or dict changed: the full check runs.
    (mutations.Step("o.class", "L['self']._modules['a']"), "fallback"),
    (mutations.Step("delete", "L['self'].gate"), "fallback"),
])
def test_skip_path_of_a_mutation(step, path, skip_every_plan):
    t = targets.TargetSpec("corpus", "mlp", "default").build()
    try:
        assert t.units[0].skip_stats() is not None
        v = oracle.run_case(t, mutations.Case(0, [step]))
        assert v.applied == 1, v.skipped
        assert v.chosen.base == [True, True]
        assert v.chosen.skip == path and v.chosen.expected is False
        assert not v.disagrees, v.summary()
    finally:
        t.close()


def test_wrong_answer_on_the_unmutated_state_is_a_disagreement():
    from guardjit.fuzz.mutations import Case
    from guardjit.fuzz.oracle import UnitAnswers, Verdict

    ok = UnitAnswers(0, "0/0", {"dynamo": False, "native": False}, skip="hit", base=[True, True])
    assert not Verdict(Case(0, []), 1, [], [ok], []).disagrees
    bad = UnitAnswers(0, "0/0", {"dynamo": False, "native": False}, skip="hit",
                      base=[True, False])
    assert Verdict(Case(0, []), 1, [], [bad], []).disagrees
    assert "unmutated: root=[True, False]" in Verdict(Case(0, []), 1, [], [bad], []).summary()


# --- the fuzzer's own process state (seed 25 of a 10000-case run) -----------

def test_half_undone_dispatch_mode_is_restored():
    """``delete G[...].torch._C`` then ``g.dispatch_mode``: the mode's
    ``__exit__`` (undone first) needs ``torch._C``, raises half way and left
    the mode on the dispatch stack, so Dynamo skipped every later frame and
    no target compiled any more. Undo.run now restores the global state."""
    t = targets.TargetSpec("corpus", "mlp", "default").build()
    try:
        case = mutations.Case(0, [mutations.Step("delete", "G['torch']._C"),
                                  mutations.Step("g.dispatch_mode")])
        v = oracle.run_case(t, case)
        assert v.applied == 2, v.skipped
        assert any("g.dispatch_mode" in e and "_C" in e for e in v.undo_errors), v.undo_errors
        assert any("restored: dispatch_modes" in e for e in v.undo_errors), v.undo_errors
        assert torch._C._len_torch_dispatch_stack() == 0
        assert not oracle.base_ok(t)
    finally:
        t.close()
    t = targets.TargetSpec("corpus", "mlp", "default").build()
    try:
        assert t.units  # torch.compile still compiles
    finally:
        t.close()


def test_global_state_is_restored_after_any_leftover():
    saved = mutations.global_state()
    mutations.FuzzDispatchMode().__enter__()
    mutations.FuzzFunctionMode().__enter__()
    torch.set_grad_enabled(not saved["grad"])
    torch.set_num_threads(saved["num_threads"] + 1)
    assert set(mutations.restore_global_state(saved)) == {
        "dispatch_modes", "dispatch_flags", "function_modes", "grad", "num_threads"}
    assert mutations.global_state() == saved
    assert mutations.restore_global_state(saved) == []


class _NoUnitSpec:
    key = "corpus:none:default"

    def build(self):
        return types.SimpleNamespace(units=[], close=lambda: None)


def test_a_target_that_compiles_nothing_is_a_harness_error():
    s = driver.Summary(0)
    driver._run_check_target(_NoUnitSpec(), 4, 0, s, driver._Bar(4, False), "", 0, None,
                             False, None)
    assert s.counts["harness_errors"] == 1 and not s.build_errors
    assert "no compile unit" in s.harness_errors[0]
    assert "HARNESS ERRORS" in s.text()


def test_stance_with_nothing_compiled_is_not_a_misroute():
    empty = routing.Call(0, "base", [], None, [], True)
    assert stance_oracle.StanceVerdict([0], 0, [empty]).nothing_compiled
    routed = routing.Call(0, "base", ["0/0"], "0/0", ["0/0"], True)
    assert not stance_oracle.StanceVerdict([0], 0, [empty, routed]).nothing_compiled
