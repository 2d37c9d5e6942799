"""``torch.compiler.set_stance(skip_guard_eval_unsafe=True)`` with guardjit:
every warmed input is served by the entry a full lookup picks in the same
cache order, with eager's result, under every differentiating-set policy.

Each scenario of stance_scenarios.py runs twice: once with plain torch in a
subprocess (``GUARDJIT`` unset) and once in-process with ``guardjit.install()``
and an oracle (Dynamo's own trees, in the cache order of each call). Both runs
make the same calls; the test compares them call by call with each other and
with eager. The scenarios include torch's own stance tests
(test/dynamo/test_skip_guard_eval_unsafe.py at v2.13.0), ported; their
specific assertions are the ``test_torch_*`` tests below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
from torch._dynamo.guards import DeletedGuardManagerWrapper
from torch._dynamo.testing import CompileCounter

import guardjit
import stance_scenarios as S
from guardjit import _core, plugin, stance


def _plain_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("GUARDJIT")}


@pytest.fixture(scope="module")
def torch_calls() -> dict:
    """Every scenario's calls with plain torch (one subprocess)."""
    proc = subprocess.run([sys.executable, S.__file__], capture_output=True, text=True,
                          env=_plain_env(), timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


@pytest.fixture(params=stance.POLICIES)
def policy(request):
    saved = plugin.config.diffset_policy
    plugin.config.diffset_policy = request.param
    assert guardjit.install()
    yield request.param
    guardjit.uninstall()
    plugin.config.diffset_policy = saved


def _check_entries(run: S.Run) -> None:
    """Every live entry's diff root is guardjit's: a guardjit unit's full root,
    its reduced root or an empty one; any other entry's full root."""
    reduced_calls = []
    for code in run.codes:
        entries = _debug_get_cache_entry_list(code)
        assert entries
        for e in entries:
            w = e.guard_manager
            if isinstance(w, DeletedGuardManagerWrapper):
                continue
            st = stance.state(w)
            if isinstance(w, plugin.GuardJitManagerWrapper):
                assert st.kind in ("full", "reduced", "empty"), st.kind
                expected = w.root if st.kind == "full" else st.reduced_root
                assert w.diff_guard_root is expected
                if st.kind == "reduced":
                    assert plugin.wait_for_tier_up(120)  # interpreter until then
                    calls, _, native = _core.guard_counters(st.check)
                    assert native == (plugin.config.mode == "native")
                    reduced_calls.append(calls)
                if st.kind == "empty":
                    assert not w.diff_guard_root.get_leaf_guards()
            else:
                assert st.kind == "opaque" and w.diff_guard_root is w.root
    # The stance's lookups ran guardjit's differentiating checks (an entry
    # behind one that serves all its inputs may never be tried).
    assert not reduced_calls or sum(reduced_calls) > 0


@pytest.mark.parametrize("name", sorted(S.SCENARIOS))
def test_scenario_routes_like_a_full_lookup(name, policy, torch_calls):
    sc = S.SCENARIOS[name]
    calls = S.run_scenario(name, oracle=True, inspect_entries=_check_entries)
    ref = torch_calls[name]
    assert [c["label"] for c in calls] == [c["label"] for c in ref]
    routed = 0
    for i, (g, t) in enumerate(zip(calls, ref)):
        assert g["eager"] == t["eager"], (i, g["label"])  # the same inputs
        if not g["stance"]:
            assert g["out"] == t["out"] and g["error"] is None, (i, g, t)
            continue
        if g["expect"] == S.NO_ENTRY:
            continue  # never warmed: the policy's promise, asserted below
        assert g["error"] is None and g["ran"] == g["expect"], (i, g)
        if not sc.unsafe_filters:
            assert g["out"] == g["eager"], (i, g)
        routed += 1
    assert routed > 0
    # Plain torch on the same calls: right wherever it is not known to misroute.
    torch_right = all(g["out"] == t["out"] for g, t in zip(calls, ref)
                      if g["stance"] and g["expect"] != S.NO_ENTRY)
    assert torch_right != sc.torch_misroutes
    s = guardjit.stats()
    assert s["diffset_updates"] > 0 and s["diffset_policy"] == policy


def test_fail_on_tensor_shape_change_raises(policy):
    """torch's test_fail_on_tensor_shape_change: a never-warmed shape raises
    the stance's error under torch-compatible (torch's seed) and under
    guarded-minimal (a rank change); minimal promises nothing there."""
    calls = S.run_scenario("fail_on_tensor_shape_change", oracle=True)
    last = calls[-1]
    assert last["expect"] == S.NO_ENTRY
    if policy == "minimal":
        assert last["error"] in (None, S.STANCE_MISS)
    else:
        assert last["error"] == S.STANCE_MISS


def test_torch_skip_all_guards_single_cache_entry(policy):
    """torch's test_skip_all_guards_single_cache_entry: the root of a unit
    with no guards stays empty, and the stance serves a new shape with it."""
    def fn(x):
        return x + 1

    cnts = CompileCounter()
    opt_fn = torch.compile(fn, backend=cnts,
                           options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe})
    x = torch.randn(4)
    assert torch.equal(opt_fn(x), fn(x))
    assert cnts.frame_count == 1
    (entry,) = _debug_get_cache_entry_list(fn.__code__)
    root = entry.guard_manager.root
    assert len(root.get_leaf_guards()) == 0
    assert len(root.get_accessors()) == 0
    assert len(root.get_epilogue_lambda_guards()) == 0
    assert isinstance(entry.guard_manager, plugin.GuardJitManagerWrapper)  # still counted
    with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
        y = torch.randn(4, 4)
        assert torch.equal(opt_fn(y), fn(y))
    assert cnts.frame_count == 1
    assert guardjit.stats()["units_empty"] >= 1


def test_torch_post_recompile_counts_frames(policy):
    """torch's test_post_recompile: no compile under the stance, and the
    usual recompile after it."""
    foo = S._foo
    foo.a, foo.b = 4, 5
    cnts = CompileCounter()
    opt_fn = torch.compile(S._post_recompile_fn, backend=cnts)
    x = torch.randn(4)
    assert torch.equal(opt_fn(x), S._post_recompile_fn(x))
    foo.a = 11
    assert torch.equal(opt_fn(x), S._post_recompile_fn(x))
    assert cnts.frame_count == 2
    try:
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            for a in (4, 11):
                foo.a = a
                assert torch.equal(opt_fn(x), S._post_recompile_fn(x))
        foo.b = 8
        assert torch.equal(opt_fn(x), S._post_recompile_fn(x))
        assert cnts.frame_count == 3
    finally:
        foo.a, foo.b = 4, 5


def test_readme_example_with_guardjit_environment_variable():
    """The issue's report as a user runs it: GUARDJIT=1, plain torch.compile."""
    code = (
        "import torch\n"
        "def fn(x, a=None, b=None):\n"
        "    x = x * 3\n"
        "    if a: x = x * 5\n"
        "    if b: x = x * 7\n"
        "    return x\n"
        "opt_fn = torch.compile(fn, backend='eager')\n"
        "x = torch.ones(4)\n"
        "refs = [opt_fn(x, a=None, b=None), opt_fn(x, a=1, b=None), opt_fn(x, a=1, b=1)]\n"
        "with torch.compiler.set_stance(skip_guard_eval_unsafe=True):\n"
        "    outs = [opt_fn(x, a=1, b=1), opt_fn(x, a=None, b=None), opt_fn(x, a=1, b=None)]\n"
        "import guardjit\n"
        "s = guardjit.stats()\n"
        "print([o[0].item() for o in outs], s['units_native'], s['diffset_updates'])\n")
    env = dict(_plain_env(), GUARDJIT="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.split("\n")[-2] == "[105.0, 3.0, 15.0] 3 3"
