"""Where guardjit attaches (issue 13, item 5).

guardjit wraps ``CheckFunctionManager.__init__``; torch's
``guard_manager_testing_hook_fn`` stays free for other code (torch's own
tests install one). Whatever hook is set, before or after guardjit, the unit
is still checked by guardjit, the hook is still called (on Dynamo's tree, as
without guardjit), and the outputs equal plain torch's. Units Dynamo builds
without its check (export) are named in ``stats()["not_offered"]``.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo.guards as dynamo_guards
from torch import nn

import guardjit
from guardjit import _core, plugin
from guardjit.bench import capture


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(x).tanh()


def _x(n: int = 2) -> torch.Tensor:
    return torch.linspace(-2, 2, 3 * n).reshape(n, 3)


def _entry_managers(code) -> list:
    return [e.guard_manager for e in
            torch._C._dynamo.eval_frame._debug_get_cache_entry_list(code)]


def _native_calls(manager) -> int:
    """Calls of the native check installed as ``manager``'s root."""
    assert plugin.wait_for_tier_up(120)  # the interpreter runs until then
    calls, _, native = _core.guard_counters(_unit_check(manager))
    assert native
    return calls


def _unit_check(manager):
    for u in plugin.units():
        if u.native_root is manager.root:
            return u.check
    raise AssertionError("no guardjit unit owns this root")


@pytest.fixture
def testing_hook():
    """Installs another program's guard_manager_testing_hook_fn; records, per
    call, whether the root it saw was Dynamo's (not guardjit's)."""
    seen: list[bool] = []
    prev = dynamo_guards.guard_manager_testing_hook_fn

    def hook(manager, f_locals, builder):  # does not chain: as torch's tests do
        seen.append(not isinstance(manager, plugin.GuardJitManagerWrapper))

    yield hook, seen
    dynamo_guards.guard_manager_testing_hook_fn = prev


def _plain_torch_output(x):
    torch._dynamo.reset()
    torch.manual_seed(0)
    out = torch.compile(Small(), backend="eager")(x)
    torch._dynamo.reset()
    return out


@pytest.mark.parametrize("when", ["before", "after"])
def test_guardjit_checks_the_unit_whatever_hook_is_installed(testing_hook, when):
    hook, seen = testing_hook
    want = _plain_torch_output(_x())
    if when == "before":
        dynamo_guards.guard_manager_testing_hook_fn = hook
    torch.manual_seed(0)
    opt = guardjit.compile(Small(), backend="eager")
    if when == "after":  # displaced the old attachment
        dynamo_guards.guard_manager_testing_hook_fn = hook
    assert torch.equal(opt(_x()), want)
    (manager,) = _entry_managers(Small.forward.__code__)
    assert isinstance(manager, plugin.GuardJitManagerWrapper)
    assert seen == [True]  # called once, on Dynamo's own tree
    before = _native_calls(manager)
    opt(_x())
    assert _native_calls(manager) == before + 1  # the lookup ran guardjit's check
    opt(_x(4))  # a new shape: recompiles, and the new unit is guardjit's too
    assert all(isinstance(m, plugin.GuardJitManagerWrapper)
               for m in _entry_managers(Small.forward.__code__))
    assert seen == [True, True]


def test_reattaches_when_init_is_replaced():
    plugin.install_hooks()
    cfm = dynamo_guards.CheckFunctionManager
    wrapped = cfm.__init__
    original = wrapped._guardjit_original
    try:
        cfm.__init__ = original  # another program restores what it saw
        assert not plugin._attached()
        opt = guardjit.compile(Small(), backend="eager")  # attaches again
        assert plugin._attached()
        opt(_x())
        (manager,) = _entry_managers(Small.forward.__code__)
        assert isinstance(manager, plugin.GuardJitManagerWrapper)
    finally:
        if not plugin._attached():
            cfm.__init__ = wrapped


def test_another_wrapper_of_init_keeps_guardjit_in_the_chain():
    plugin.install_hooks()
    cfm = dynamo_guards.CheckFunctionManager
    ours = cfm.__init__
    calls = []

    import functools

    @functools.wraps(ours)
    def theirs(self, *args, **kwargs):
        calls.append(1)
        ours(self, *args, **kwargs)

    cfm.__init__ = theirs
    try:
        assert plugin._attached()
        opt = guardjit.compile(Small(), backend="eager")
        assert cfm.__init__ is theirs  # not wrapped twice
        opt(_x())
        (manager,) = _entry_managers(Small.forward.__code__)
        assert isinstance(manager, plugin.GuardJitManagerWrapper) and calls == [1]
    finally:
        cfm.__init__ = ours


def test_export_is_named_as_never_offered():
    torch.manual_seed(0)
    model = Small()
    want = torch._dynamo.export(model)(_x())[0](_x())  # plain torch first
    torch._dynamo.reset()
    before = guardjit.stats()
    assert guardjit.install()
    try:
        graph, _ = torch._dynamo.export(model)(_x())
        compiled = torch.compile(model, backend="eager")
        assert torch.equal(compiled(_x()), model(_x()))
    finally:
        guardjit.uninstall()
    assert torch.equal(graph(_x()), want)
    after = guardjit.stats()
    new = after["not_offered"][len(before["not_offered"]):]
    assert [(u["code"], u["reason"].split(":")[0]) for u in new] == [("forward", "export")]
    assert after["units_not_offered"] == before["units_not_offered"] + 1
    # The normal compile afterwards was offered and converted.
    assert after["units_native"] == before["units_native"] + 1
    assert after["units_seen"] == before["units_seen"] + 1


def test_units_outside_guardjit_are_not_listed():
    before = guardjit.stats()
    torch._dynamo.export(Small())(_x())  # guardjit not active for it
    torch.compile(Small(), backend="eager")(_x())
    after = guardjit.stats()
    assert after["not_offered"] == before["not_offered"]
    assert after["units_seen"] == before["units_seen"]


def test_bench_captures_units_despite_another_hook(testing_hook):
    hook, seen = testing_hook
    dynamo_guards.guard_manager_testing_hook_fn = hook
    with capture.capture_units() as got:
        guardjit.compile(Small(), backend="eager")(_x())
    assert len(got) == 1 and seen == [True]
    (c,) = got
    assert c.dynamo_root is not c.final_root
    assert c.code is Small.forward.__code__
    assert c.dynamo_root.check(c.f_locals) and c.final_root.check(c.f_locals)
    (manager,) = _entry_managers(Small.forward.__code__)
    assert manager.root is c.final_root


def test_bench_captures_plain_torch_units_too():
    with capture.capture_units() as got:
        torch.compile(Small(), backend="eager")(_x())  # guardjit not active
    assert len(got) == 1
    assert got[0].dynamo_root is got[0].final_root  # left as Dynamo built it


def test_uninstall_restores_init_when_no_unit_is_alive(monkeypatch):
    cfm = dynamo_guards.CheckFunctionManager
    assert guardjit.install()
    torch.compile(Small(), backend="eager")(_x())
    guardjit.uninstall()
    assert plugin._attached()  # a guardjit unit is alive: it must see later units
    # (torch's invalidate finalizers keep a CheckFunctionManager, and so its
    # wrapper, alive while the guarded objects live, even after reset.)
    assert guardjit.install()
    monkeypatch.setattr(plugin, "_guardjit_units_alive", lambda: False)
    guardjit.uninstall()
    assert not plugin._attached()
    assert not hasattr(cfm.__init__, "_guardjit_original")
    monkeypatch.undo()
    plugin.install_hooks()  # as the other tests expect
    assert plugin._attached()
