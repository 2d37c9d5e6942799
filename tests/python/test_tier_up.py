"""The background tier (include/guardjit/Check/TierUp.h, guardjit/tiering.py): a new
unit runs the interpreter at once while its native code is compiled off the
calling thread (at light, then O1) and swapped in atomically; the first call
of new code also runs the interpreter. Checked against plain torch's answers
(Dynamo's own root), eager results, threads calling while code is replaced,
units dying before their compile, interpreter exit with compiles queued, and
fork."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import guardjit
from guardjit import _core, plugin, tiering
from guardjit.bench import capture


@pytest.fixture
def installed():
    assert guardjit.install()
    yield
    guardjit.uninstall()


class Block(torch.nn.Module):
    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(n))
        self.scale = 0.5

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x)) * self.scale
        return x


def _compiled_unit(model, x):
    torch._dynamo.reset()
    with capture.keep_units(), capture.capture_units() as captured:
        opt = guardjit.compile(model, backend="eager")
        opt(x)
        units = plugin.units()
    assert captured and units and units[0].status == "native"
    return opt, captured[0], units[0]


def _variants(x):
    """Frame-locals changes that Dynamo's guards see (and one they pass)."""
    yield "same", lambda fl: dict(fl)
    yield "dtype", lambda fl: {**fl, "x": x.double()}
    yield "shape", lambda fl: {**fl, "x": torch.randn(3, 8)}
    yield "stride", lambda fl: {**fl, "x": torch.randn(8, 2).t()}
    yield "requires_grad", lambda fl: {**fl, "x": x.clone().requires_grad_()}
    yield "missing", lambda fl: {k: v for k, v in fl.items() if k != "x"}


def test_every_level_agrees_with_dynamos_root_on_the_same_bound_set():
    """light and O1 code of one bound set answer as Dynamo's own root on
    every frame-locals variant (and on module state changes)."""
    model, x = Block(), torch.randn(2, 8)
    _opt, cap, unit = _compiled_unit(model, x)
    checks = {lvl: _core.make_guard(unit.bound, _core.compile(unit.bound, lvl))
              for lvl in ("light", "O1")}
    seen = set()
    for name, make in _variants(x):
        fl = make(cap.f_locals)
        want = bool(cap.dynamo_root.check(fl))
        seen.add(want)
        for lvl, chk in checks.items():
            assert bool(chk(fl)) is want, (name, lvl)
    model.scale = 0.25  # an EQUALS_MATCH on a module attribute
    fl = dict(cap.f_locals)
    assert cap.dynamo_root.check(fl) is False
    assert all(chk(fl) is False for chk in checks.values())
    model.scale = 0.5
    assert seen == {True, False}


def test_compiled_unit_tiers_up_to_O1_and_stats_say_so(installed):
    before = _core.tier_up_stats()["installed"]
    model, x = Block(), torch.randn(2, 8)
    opt, cap, unit = _compiled_unit(model, x)
    assert plugin.wait_for_tier_up(60)
    assert tiering.level_of(unit.check) == "O1"
    st = guardjit.stats()["tier_up"]
    assert st["level"] == "O1" and st["pending"] == 0
    assert st["installed"] > before
    # The swapped code is what the installed root runs: same answers.
    assert cap.final_root.check(cap.f_locals) is True
    assert cap.final_root.check({**cap.f_locals, "x": x.double()}) is False
    assert torch.equal(opt(x), model(x))


def test_tier_up_off_keeps_the_first_code(installed, monkeypatch):
    monkeypatch.setattr(plugin.config, "tier_up", "off")
    _opt, _cap, unit = _compiled_unit(Block(1), torch.randn(2, 8))
    plugin.wait_for_tier_up(60)
    assert tiering.level_of(unit.check) == plugin.config.opt_level
    assert not plugin.tier_up(unit.check)


def test_no_call_waits_for_llvm(installed):
    """The default first tier: the unit is installed running the interpreter
    and no LLVM compile ran on the calling thread (compile_ms 0); the code
    arrives from the background thread, O0 first, then O1, and every call
    meanwhile answers as Dynamo's root."""
    assert plugin.config.first_tier == "background"
    st0 = _core.tier_up_stats()
    model, x = Block(4), torch.randn(2, 8)
    opt, cap, unit = _compiled_unit(model, x)
    assert unit.compile_ms == 0.0 and unit.native is None
    assert _core.tier_up_stats()["scheduled"] > st0["scheduled"]
    seen = []
    for _ in range(200):  # calls while the code is on its way (or just landed)
        seen.append(tiering.level_of(unit.check))
        assert cap.final_root.check(cap.f_locals) is True
        assert cap.final_root.check({**cap.f_locals, "x": x.double()}) is False
    assert plugin.wait_for_tier_up(60) and tiering.level_of(unit.check) == "O1"
    assert cap.final_root.check(cap.f_locals) is True
    assert torch.equal(opt(x), model(x))
    st = _core.tier_up_stats()
    assert st["installed"] - st0["installed"] >= 2  # O0, then O1
    assert st["distrusted"] == st0["distrusted"]
    assert seen[0] in (None, plugin.config.opt_level, "O1")


def test_sync_first_tier_compiles_on_the_calling_thread(installed, monkeypatch):
    monkeypatch.setattr(plugin.config, "first_tier", "sync")
    _opt, _cap, unit = _compiled_unit(Block(2), torch.randn(2, 8))
    assert unit.native is not None and unit.compile_ms > 0
    assert tiering.level_of(unit.check) in (plugin.config.opt_level, "O1")
    assert plugin.wait_for_tier_up(60) and tiering.level_of(unit.check) == "O1"


def test_first_call_of_new_code_is_checked_against_the_interpreter(capfd):
    """Code whose answer differs from the interpreter's on its first call is
    dropped for good, and the interpreter's answer stands (here: the code of
    another unit's set, which rejects these frame locals)."""
    _o2, _cap_b, b = _compiled_unit(Block(1), torch.randn(3, 8))  # another model, shape
    _o1, cap_a, a = _compiled_unit(Block(1), torch.randn(2, 8))
    wrong = _core.compile(b.bound, "light")
    assert _core.make_guard(b.bound, wrong)(cap_a.f_locals) is False
    before = _core.tier_up_stats()["distrusted"]
    check = _core.make_guard(a.bound, wrong, verify_first_call=True)
    assert tiering.level_of(check) == "light"
    assert check(cap_a.f_locals) is True  # the interpreter's answer
    assert tiering.level_of(check) is None  # the code is gone for good
    assert check(cap_a.f_locals) is True
    assert _core.tier_up_stats()["distrusted"] == before + 1
    assert "the first call of new native code answered 0, the interpreter 1" in \
        capfd.readouterr().err  # the C++ logger's warning
    # Agreeing code stays.
    good = _core.make_guard(a.bound, _core.compile(a.bound, "light"), verify_first_call=True)
    assert good(cap_a.f_locals) is True and tiering.level_of(good) == "light"


def test_a_guard_whose_python_code_changes_its_answer_keeps_the_interpreter(installed, capfd):
    """A module ``__getattr__`` (PEP 562) that answers differently on its next
    call: the first call of the native code sees 3, the interpreter after it
    4. The interpreter's answer (a miss) stands, Dynamo recompiles, the
    result is eager's, and guardjit says why it dropped the code."""
    import types

    mod = types.ModuleType("gj_flip_mod")
    answers: list[int] = []

    def module_getattr(name):
        if name == "SCALE":
            return answers.pop(0) if answers else 3
        raise AttributeError(name)

    mod.__getattr__ = module_getattr
    sys.modules[mod.__name__] = mod
    try:
        def fn(x):
            return x * mod.SCALE

        opt = torch.compile(fn, backend="eager")
        x = torch.ones(2)
        assert torch.equal(opt(x), fn(x))
        assert plugin.wait_for_tier_up(60)
        before = _core.tier_up_stats()["distrusted"]
        answers[:] = [3, 4]  # native first, then the interpreter
        assert torch.equal(opt(x), x * 3)
        assert _core.tier_up_stats()["distrusted"] == before + 1
        assert "the first call of new native code answered 1, the interpreter 0" in \
            capfd.readouterr().err
        assert torch.equal(opt(x), x * 3)  # served again
    finally:
        del sys.modules[mod.__name__]


def test_a_bad_level_keeps_the_first_code_and_warns(installed, monkeypatch, caplog):
    monkeypatch.setattr(plugin.config, "tier_up", "O3")
    model, x = Block(1), torch.randn(2, 8)
    log = logging.getLogger("guardjit")  # its own handler, no propagation
    log.addHandler(caplog.handler)
    try:
        opt, _cap, unit = _compiled_unit(model, x)
    finally:
        log.removeHandler(caplog.handler)
    assert plugin.wait_for_tier_up(60)
    assert unit.status == "native" and tiering.level_of(unit.check) == plugin.config.opt_level
    assert any("background tier" in r.getMessage() for r in caplog.records)
    assert torch.equal(opt(x), model(x))


def test_nothing_to_gain_is_not_queued():
    model, x = Block(1), torch.randn(2, 8)
    _opt, _cap, unit = _compiled_unit(model, x)
    interp = _core.make_guard(unit.bound, None)
    assert tiering.level_of(interp) is None
    assert not _core.tier_up(interp, "O1")  # the interpreter is a chosen mode
    light = _core.make_guard(unit.bound, _core.compile(unit.bound, "light"))
    assert _core.tier_up(light, "O1")
    assert not _core.tier_up(light, "O1")  # already queued: one compile
    assert plugin.wait_for_tier_up(60) and tiering.level_of(light) == "O1"
    o2 = _core.make_guard(unit.bound, _core.compile(unit.bound, "O2"))
    assert not _core.tier_up(o2, "O1")  # already above
    with pytest.raises(TypeError):
        _core.tier_up(len, "O1")
    with pytest.raises(ValueError):
        _core.tier_up(o2, "O3")


def test_calls_from_threads_while_code_is_replaced(installed):
    """Four threads call compiled functions while their checks tier up (and
    while further functions compile and tier up): every result is eager's."""
    torch._dynamo.reset()
    models = [Block(n) for n in (1, 2, 3, 4)]
    opts = [guardjit.compile(m, backend="eager") for m in models]
    xs = [torch.randn(2, 8), torch.randn(3, 8)]
    want = [[m(x) for x in xs] for m in models]
    errors: list = []
    stop = threading.Event()

    def caller(i: int) -> None:
        try:
            while not stop.is_set():
                for j, x in enumerate(xs):
                    if not torch.equal(opts[i](x), want[i][j]):
                        errors.append((i, j))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        assert plugin.wait_for_tier_up(120)
        for i in range(4):  # more compiles and swaps while the callers run
            opts[i](torch.randn(5, 8))
        assert plugin.wait_for_tier_up(120)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    # A caller's call may have compiled one more unit after the last wait.
    assert plugin.wait_for_tier_up(120) and _core.tier_up_stats()["pending"] == 0


def test_units_dying_before_their_background_compile(installed):
    """Units evicted (torch._dynamo.reset) while their compile is queued or
    running: nothing crashes, the queue drains, and later units still tier."""
    st0 = _core.tier_up_stats()
    torch._dynamo.reset()
    for n in range(6):
        m = Block(4)
        guardjit.compile(m, backend="eager")(torch.randn(2, 8))
        del m
        torch._dynamo.reset()
    assert plugin.wait_for_tier_up(120)
    st = _core.tier_up_stats()
    assert st["pending"] == 0 and st["failed"] == st0["failed"]
    assert st["scheduled"] - st0["scheduled"] >= 6
    assert (st["installed"] - st0["installed"]) + (st["dropped"] - st0["dropped"]) \
        == st["scheduled"] - st0["scheduled"]
    _opt, _cap, unit = _compiled_unit(Block(2), torch.randn(2, 8))
    assert plugin.wait_for_tier_up(60) and tiering.level_of(unit.check) == "O1"


def _run_child(body: str) -> subprocess.CompletedProcess:
    code = textwrap.dedent(body)
    env = {k: v for k, v in os.environ.items() if k != "GUARDJIT"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env)


def test_interpreter_exit_with_compiles_queued():
    """A process that exits right after compiling (its background compiles
    queued or running) exits cleanly: the atexit hook stops the worker."""
    r = _run_child("""
        import torch, guardjit
        from guardjit import _core
        class M(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(n))
            def forward(self, x):
                for l in self.layers:
                    x = l(x)
                return x
        for n in (8, 16, 24):
            guardjit.compile(M(n), backend="eager")(torch.randn(2, 8))
        st = _core.tier_up_stats()
        assert st["scheduled"] >= 3, st
        print("pending at exit:", st["pending"])
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "pending at exit:" in r.stdout
    assert "Traceback" not in r.stderr and "Fatal" not in r.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_gets_its_own_worker():
    """After fork (the parent's compile finished first), the child compiles,
    tiers up and checks with a worker of its own; the parent's still runs."""
    r = _run_child("""
        import os, torch, guardjit
        from guardjit import plugin, tiering
        from guardjit.bench import capture
        def unit(n):
            m = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(n)])
            with capture.keep_units():
                opt = guardjit.compile(m, backend="eager")
                x = torch.randn(2, 8)
                assert torch.equal(opt(x), m(x))
                return plugin.units()[-1]
        u = unit(12)
        pid = os.fork()
        if pid == 0:
            v = unit(3)
            ok = plugin.wait_for_tier_up(120) and tiering.level_of(v.check) == "O1"
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert plugin.wait_for_tier_up(120) and tiering.level_of(u.check) == "O1"
        print("ok")
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok")
