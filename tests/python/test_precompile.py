"""torch's precompiled artifacts checked by guardjit (issue 27, deliverable 1).

torch 2.13's precompile routes (``torch.compile(f, fullgraph=True).aot_compile``,
``OptimizedModule._aot_compile`` / ``AOTCompiledModel``, and loading either
with ``torch.compiler.load_compiled_function`` / ``_load_aot_compiled_module``)
check guards from Python: ``AOTCompiledFunction.guard_check`` calls the
wrapper's ``check`` on the dict ``prepare_f_locals`` builds. A unit compiled
here is converted at compile time, a loaded one (built with
``skip_guards_check``) at its first passing check (precompile.py).

Every scenario runs side by side with plain torch (guardjit not active) and
compares answers, outputs (also against eager) and the error text on a miss.
The fresh-process tests save with plain torch and load in a new interpreter
with ``GUARDJIT=1`` and with ``GUARDJIT`` unset.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._dynamo.aot_compile import ModelInput

import guardjit
from guardjit import _core, plugin


from precompile_cases import Net as _Net
from precompile_cases import f as _f
from precompile_cases import x_ as _x

HERE = os.path.dirname(os.path.abspath(__file__))


# The calls each scenario makes: one hit, then misses by shape, dtype,
# requires_grad, a hit again.
_CALLS = [
    ("hit", lambda: (_x(3, 4), _x(3, 4, seed=1))),
    ("shape", lambda: (_x(5, 4), _x(5, 4, seed=1))),
    ("dtype", lambda: (_x(3, 4, dtype=torch.float64), _x(3, 4, seed=1))),
    ("requires_grad", lambda: (_x(3, 4, requires_grad=True), _x(3, 4, seed=1))),
    ("hit again", lambda: (_x(3, 4, seed=2), _x(3, 4, seed=3))),
]


def _run(fn, calls):
    """(label, "ok" and the output's agreement with eager | the error text)."""
    out = []
    for label, make in calls:
        args = make()
        try:
            got = fn(*args)
        except RuntimeError as e:
            out.append((label, str(e)))
            continue
        want = _f(*args)
        out.append((label, "ok" if torch.allclose(got.detach(), want.detach()) else "WRONG"))
    return out


def _aot_function(install: bool):
    compiled = torch.compile(_f, fullgraph=True, backend="eager")
    if not install:
        return compiled.aot_compile(((_x(3, 4), _x(3, 4, seed=1)), {}))
    assert guardjit.install()
    try:
        return compiled.aot_compile(((_x(3, 4), _x(3, 4, seed=1)), {}))
    finally:
        guardjit.uninstall()


def _load_installed(path: str):
    """``load_compiled_function(path)`` with guardjit installed for the load
    (its unit is deferred to its first check), uninstalled after."""
    assert guardjit.install()
    try:
        with open(path, "rb") as fh:
            return torch.compiler.load_compiled_function(fh)
    finally:
        guardjit.uninstall()


def _check_of(fn):
    wrapper = fn._artifacts.guard_manager
    assert isinstance(wrapper, plugin.GuardJitManagerWrapper)
    return wrapper.guardjit_check


def _native_calls(check) -> int:
    assert plugin.wait_for_tier_up(120)
    calls, _, native = _core.guard_counters(check)
    assert native
    return calls


def test_aot_compiled_function_side_by_side():
    plain = _run(_aot_function(install=False), _CALLS)
    before = guardjit.stats()["precompile"]
    fn = _aot_function(install=True)
    check = _check_of(fn)
    calls0 = _native_calls(check)
    got = _run(fn, _CALLS)
    assert got == plain
    assert [r for _, r in got] == ["ok", *[r for _, r in plain[1:4]], "ok"]
    assert all(r.startswith("GuardManager check failed, reason: ") for _, r in got[1:4])
    # One guard_check per call (a miss also asks Dynamo's tree, not guardjit
    # again): guardjit's native code answered every call.
    assert _native_calls(check) - calls0 == len(_CALLS)
    after = guardjit.stats()["precompile"]
    assert after["units_live"] == before["units_live"] + 1
    assert after["miss_disagreements"] == before["miss_disagreements"]


def test_guardjit_compile_aot_compile_is_guardjit_s():
    """guardjit.compile(f, fullgraph=True).aot_compile converts its unit
    without guardjit.install()."""
    fn = guardjit.compile(_f, fullgraph=True, backend="eager").aot_compile(
        ((_x(3, 4), _x(3, 4, seed=1)), {}))
    check = _check_of(fn)
    calls0 = _native_calls(check)
    assert _run(fn, _CALLS) == _run(_aot_function(install=False), _CALLS)
    assert _native_calls(check) - calls0 == len(_CALLS)


def test_loaded_function_converts_at_its_first_passing_check(tmp_path):
    path = str(tmp_path / "f.bin")
    _aot_function(install=False).save_compiled_function(path)
    with open(path, "rb") as fh:
        plain_fn = torch.compiler.load_compiled_function(fh)
    # A miss first (Dynamo's tree answers, nothing to convert on), then hits.
    calls = [_CALLS[2], *_CALLS]
    plain = _run(plain_fn, calls)

    before = guardjit.stats()
    fn = _load_installed(path)
    assert isinstance(fn._artifacts.guard_manager, plugin.DeferredManagerWrapper)
    assert guardjit.stats()["precompile"]["pending"] == before["precompile"]["pending"] + 1
    got = _run(fn, calls[:2])
    check = _check_of(fn)
    calls0 = _native_calls(check)
    got += _run(fn, calls[2:])
    assert got == plain
    assert _native_calls(check) - calls0 == len(calls) - 2
    after = guardjit.stats()
    p0, p1 = before["precompile"], after["precompile"]
    assert p1["deferred"] == p0["deferred"] + 1
    assert p1["converted_at_first_check"] == p0["converted_at_first_check"] + 1
    assert p1["pending"] == p0["pending"]
    assert after["units_native"] == before["units_native"] + 1
    assert after["units_not_offered"] == before["units_not_offered"]


_VARIANTS = {
    # SHAPE_ENV guards rebuilt at load from the saved shape_code_parts
    "dynamic": {"dynamic": True},
    # torch's own filter for portable guards (what AOTInductor would keep)
    "portable": {"options": {"guard_filter_fn": torch.compiler.keep_portable_guards_unsafe}},
}


@pytest.mark.parametrize("variant", sorted(_VARIANTS))
def test_loaded_variants_side_by_side(tmp_path, variant):
    path = str(tmp_path / "f.bin")
    compiled = torch.compile(_f, fullgraph=True, backend="eager", **_VARIANTS[variant])
    compiled.aot_compile(((_x(3, 4), _x(3, 4, seed=1)), {})).save_compiled_function(path)
    calls = [*_CALLS,
             ("batch 1", lambda: (_x(1, 4), _x(1, 4, seed=1))),
             ("batch 7", lambda: (_x(7, 4), _x(7, 4, seed=1))),
             ("mixed", lambda: (_x(5, 4), _x(3, 4, seed=1))),
             ("rank 3", lambda: (_x(3, 4, 2), _x(3, 4, 2, seed=1)))]
    with open(path, "rb") as fh:
        plain = _run(torch.compiler.load_compiled_function(fh), calls)
    before = guardjit.stats()["precompile"]
    fn = _load_installed(path)
    got = _run(fn, calls[:1])
    check = _check_of(fn)
    calls0 = _native_calls(check)
    got += _run(fn, calls[1:])
    assert got == plain
    assert _native_calls(check) - calls0 == len(calls) - 1
    if variant == "dynamic":  # a batch of 5 and of 7 hit the dynamic graph
        assert dict(got)["shape"] == dict(got)["batch 7"] == "ok"
    after = guardjit.stats()["precompile"]
    assert after["converted_at_first_check"] == before["converted_at_first_check"] + 1


def test_threads_calling_a_loaded_artifact_first(tmp_path):
    """Threads racing to the first check: every answer right, one conversion."""
    import threading

    path = str(tmp_path / "f.bin")
    _aot_function(install=False).save_compiled_function(path)
    before = guardjit.stats()["precompile"]
    fn = _load_installed(path)
    results: list = []
    start = threading.Barrier(4)

    def work(seed):
        start.wait()
        results.append(_run(fn, [_CALLS[(seed + i) % len(_CALLS)] for i in range(40)]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = dict(_run(fn, _CALLS))
    assert len(results) == 4
    assert all(answer == want[label] for got in results for label, answer in got)
    after = guardjit.stats()["precompile"]
    assert after["converted_at_first_check"] == before["converted_at_first_check"] + 1
    assert isinstance(fn._artifacts.guard_manager, plugin.GuardJitManagerWrapper)


def test_a_declined_first_check_stays_on_dynamo_tree(tmp_path):
    path = str(tmp_path / "f.bin")
    _aot_function(install=False).save_compiled_function(path)
    with open(path, "rb") as fh:
        plain = _run(torch.compiler.load_compiled_function(fh), _CALLS)
    before = guardjit.stats()["precompile"]
    assert guardjit.install()
    saved = plugin.config.pipeline
    try:
        with open(path, "rb") as fh:
            fn = torch.compiler.load_compiled_function(fh)
        plugin.config.pipeline = "no-such-pass"
        got = _run(fn, _CALLS)
    finally:
        plugin.config.pipeline = saved
        guardjit.uninstall()
    assert got == plain
    wrapper = fn._artifacts.guard_manager
    assert type(wrapper) is torch._dynamo.guards.GuardManagerWrapper
    after = guardjit.stats()["precompile"]
    assert after["declined_at_first_check"] == before["declined_at_first_check"] + 1
    new = {k: v - before["declined_reasons"].get(k, 0)
           for k, v in after["declined_reasons"].items()}
    assert [k.split(":")[0] for k, v in new.items() if v] == ["pipeline"]


def test_a_wrong_native_miss_is_overruled_by_dynamo_tree():
    """Should guardjit's check reject what Dynamo's tree accepts, the call
    gets Dynamo's answer and the unit goes back to Dynamo's tree."""
    from torch._C._dynamo.guards import RootGuardManager

    fn = _aot_function(install=True)
    wrapper = fn._artifacts.guard_manager
    dynamo_root = wrapper.dynamo_root
    broken = RootGuardManager()
    broken.add_lambda_guard(lambda _: False, ["a check that always fails"], None)
    wrapper.root = broken  # stands for a guardjit bug
    before = guardjit.stats()["precompile"]["miss_disagreements"]
    assert _run(fn, _CALLS[:1]) == [("hit", "ok")]
    assert guardjit.stats()["precompile"]["miss_disagreements"] == before + 1
    assert wrapper.root is dynamo_root


def _live_checks() -> int:
    import gc

    gc.collect()
    assert plugin.wait_for_tier_up(120)
    gc.collect()
    return _core.live_checks()


def test_a_dropped_loaded_artifact_frees_its_check(tmp_path):
    """A loaded artifact's wrapper dies with it (plain torch keeps the
    CheckFunctionManager of an artifact compiled in the process alive through
    the weakref.finalize of the objects its unfiltered first build
    ID_MATCHed, so guardjit's check of such a unit lives as long as torch's
    tree does)."""
    import weakref

    path = str(tmp_path / "f.bin")
    _aot_function(install=False).save_compiled_function(path)
    base = _live_checks()
    loaded = _load_installed(path)
    loaded(*_CALLS[0][1]())  # converts
    wrapper = weakref.ref(loaded._artifacts.guard_manager)
    assert isinstance(wrapper(), plugin.GuardJitManagerWrapper)
    assert _live_checks() > base
    plugin.clear_units()  # the records keep checks too
    del loaded
    assert _live_checks() == base
    assert wrapper() is None


def _aot_module(install: bool):
    torch.manual_seed(0)
    net = _Net()
    opt = torch.compile(net, fullgraph=True, backend="eager")
    inputs = [ModelInput((_x(2, 4),), {}, []), ModelInput((_x(5, 4),), {}, [])]
    # Each input its own static graph (else the second marks the batch dynamic).
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False):
        if install:
            assert guardjit.install()
        try:
            opt._aot_compile(inputs)
        finally:
            if install:
                guardjit.uninstall()
    return net, opt


_MODULE_CALLS = [2, 5, 2, 3, "float64", 5]


def _run_module(net, opt):
    out = []
    for i, c in enumerate(_MODULE_CALLS):
        x = _x(4, 4, dtype=torch.float64)[:2] if c == "float64" else _x(c, 4, seed=i)
        try:
            got = opt(x)
        except RuntimeError as e:
            out.append((c, str(e)))
            continue
        out.append((c, "ok" if torch.allclose(got, net(x)) else "WRONG"))
    return out


def test_aot_compiled_module_with_two_inputs_side_by_side():
    plain = _run_module(*_aot_module(install=False))
    net, opt = _aot_module(install=True)
    wrappers = [r._artifacts.guard_manager for r in opt.forward.compiled_results]
    assert all(isinstance(w, plugin.GuardJitManagerWrapper) for w in wrappers)
    calls0 = [_native_calls(w.guardjit_check) for w in wrappers]
    got = _run_module(net, opt)
    assert got == plain
    assert [r for _, r in got if not r.startswith("GuardManager check failed")] == ["ok"] * 4
    assert len(got) == 6
    # AOTCompiledModel checks each result in order, then the chosen one again
    # in its __call__; a miss of every result checks the first one again.
    # batch 2: r0 twice; 5: r0, r1 twice; 2; 3: r0, r1, r0; f64: the same; 5.
    calls = [_native_calls(w.guardjit_check) - c for w, c in zip(wrappers, calls0)]
    assert calls == [2 + 1 + 2 + 2 + 2 + 1, 2 + 1 + 1 + 2]


@pytest.mark.parametrize("option", ["use_recursive_dict_tags_for_guards",
                                    "install_free_tensors"])
def test_aot_compiled_module_under_torch_options_side_by_side(option):
    """The module route under dict tags or install_free_tensors, with the
    weights changed in place between two passes: guardjit's answers and
    error texts are plain torch's, and its native checks run."""
    with torch._dynamo.config.patch(**{option: True}):
        got = {}
        for install in (False, True):
            torch._dynamo.reset()
            net, opt = _aot_module(install)
            got[install] = _run_module(net, opt)
            with torch.no_grad():
                net.lin.weight.mul_(2)
            got[install] += _run_module(net, opt)
            if install:
                wrappers = [r._artifacts.guard_manager for r in opt.forward.compiled_results]
                assert all(isinstance(w, plugin.GuardJitManagerWrapper) for w in wrappers)
                assert sum(_native_calls(w.guardjit_check) for w in wrappers) > 0
    assert got[True] == got[False]
    assert [r for _, r in got[True] if not r.startswith("GuardManager check failed")] \
        == ["ok"] * 8


def test_the_stance_does_not_reach_precompiled_functions():
    """torch checks AOTCompiledFunction's full guards under
    skip_guard_eval_unsafe too (AOTCompiledFunction.__call__ reads no
    stance): so does guardjit."""
    calls = [_CALLS[0], _CALLS[2]]
    with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
        plain = _run(_aot_function(install=False), calls)
        got = _run(_aot_function(install=True), calls)
    assert got == plain
    assert got[1][1].startswith("GuardManager check failed")


# --- save -> load in a fresh process -------------------------------------------

_SCRIPT = textwrap.dedent('''
    import json, sys
    import torch
    from torch._dynamo.aot_compile import ModelInput

    from precompile_cases import Net, f, x_

    CALLS = [("dtype", (x_(3, 4, dtype=torch.float64), x_(3, 4, seed=1))),
             ("hit", (x_(3, 4), x_(3, 4, seed=1))),
             ("shape", (x_(5, 4), x_(5, 4, seed=1))),
             ("requires_grad", (x_(3, 4, requires_grad=True), x_(3, 4, seed=1))),
             ("hit", (x_(3, 4, seed=2), x_(3, 4, seed=3))),
             ("hit", (x_(3, 4, seed=4), x_(3, 4, seed=5)))]
    MODULE_CALLS = [("float64", x_(2, 4, dtype=torch.float64)), ("b2", x_(2, 4)),
                    ("b5", x_(5, 4, seed=1)), ("b3", x_(3, 4, seed=2)),
                    ("b2", x_(2, 4, seed=3)), ("b5", x_(5, 4, seed=4))]

    def net():
        torch.manual_seed(0)
        return Net()

    def answer(fn, args, eager, after=None):
        try:
            got = fn(*args)
        except RuntimeError as e:
            return str(e)
        return "ok" if torch.allclose(got.detach(), eager(*args).detach()) else "WRONG"

    mode, directory = sys.argv[1], sys.argv[2]
    if mode == "save":
        fn = torch.compile(f, fullgraph=True, backend="eager").aot_compile(
            ((x_(3, 4), x_(3, 4, seed=1)), {}))
        fn.save_compiled_function(directory + "/f.bin")
        opt = torch.compile(net(), fullgraph=True, backend="eager")
        with torch._dynamo.config.patch(automatic_dynamic_shapes=False):
            opt._aot_compile([ModelInput((x_(2, 4),), {}, []), ModelInput((x_(5, 4),), {}, [])])
        opt._save_aot_compiled_module(directory + "/net.bin")
        sys.exit(0)

    guardjit_on = mode == "guardjit"
    if guardjit_on:
        import guardjit
        from guardjit import _core, plugin
    with open(directory + "/f.bin", "rb") as fh:
        fn = torch.compiler.load_compiled_function(fh)
    model = net()
    opt = torch.compile(model, fullgraph=True, backend="eager")
    with open(directory + "/net.bin", "rb") as fh:
        opt._load_aot_compiled_module(fh.read())
    wrappers = [fn._artifacts.guard_manager] + [
        r._artifacts.guard_manager for r in opt.forward.compiled_results]
    out = {"classes_at_load": [type(w).__name__ for w in wrappers],
           "function": [], "module": [], "native_calls": []}

    def counts():
        if not guardjit_on:
            return None
        plugin.wait_for_tier_up(120)
        return [list(_core.guard_counters(w.guardjit_check))
                if isinstance(w, plugin.GuardJitManagerWrapper) else None for w in wrappers]

    for label, args in CALLS:
        before = counts()
        out["function"].append([label, answer(fn, args, f)])
        out["native_calls"].append([before, counts()])
    for label, x in MODULE_CALLS:
        before = counts()
        out["module"].append([label, answer(opt, (x,), model)])
        out["native_calls"].append([before, counts()])
    out["classes"] = [type(w).__name__ for w in wrappers]
    if guardjit_on:
        s = guardjit.stats()
        out["stats"] = {"precompile": s["precompile"], "units_native": s["units_native"],
                        "units_dynamo": s["units_dynamo"],
                        "fallback_reasons": s["fallback_reasons"],
                        "not_offered": s["not_offered"]}
    print(json.dumps(out))
''')


def _fresh(mode: str, directory: str, guardjit_var: str | None) -> dict | None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDJIT")}
    # The guardjit this test imports (a worktree's or the installed one).
    here = str(pathlib.Path(guardjit.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([here, HERE, *filter(None, [env.get("PYTHONPATH")])])
    if guardjit_var is not None:
        env["GUARDJIT"] = guardjit_var
    script = pathlib.Path(directory) / "artifacts.py"
    script.write_text(_SCRIPT)
    r = subprocess.run([sys.executable, str(script), mode, directory], env=env,
                       capture_output=True, text=True, timeout=600, cwd=directory)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]) if mode != "save" else None


def test_save_then_load_in_a_fresh_process(tmp_path):
    directory = str(tmp_path)
    _fresh("save", directory, None)  # plain torch saves
    plain = _fresh("plain", directory, None)
    gj = _fresh("guardjit", directory, "1")
    assert plain["classes"] == ["GuardManagerWrapper"] * 3
    assert gj["classes_at_load"] == ["DeferredManagerWrapper"] * 3
    assert gj["classes"] == ["GuardJitManagerWrapper"] * 3
    # Same answers and error texts as plain torch, outputs equal to eager.
    assert gj["function"] == plain["function"]
    assert gj["module"] == plain["module"]
    assert [a for _, a in plain["function"]] == [
        plain["function"][0][1], "ok", plain["function"][2][1], plain["function"][3][1],
        "ok", "ok"]
    assert all(a.startswith("GuardManager check failed, reason: ")
               for i, (_, a) in enumerate(plain["function"]) if i in (0, 2, 3))
    assert [a for _, a in plain["module"]][1:] == ["ok", "ok", plain["module"][3][1], "ok", "ok"]
    assert plain["module"][3][1].startswith("GuardManager check failed, reason: ")
    # Each unit was loaded without Dynamo's check, converted at its first
    # passing check, and guardjit's native code checked every call after.
    p = gj["stats"]["precompile"]
    assert (p["deferred"], p["converted_at_first_check"], p["pending"]) == (3, 3, 0)
    assert (p["units_live"], p["units_native"], p["miss_disagreements"]) == (3, 3, 0)
    assert gj["stats"]["units_native"] == 3 and gj["stats"]["units_dynamo"] == 0
    assert gj["stats"]["not_offered"] == []
    steps = gj["native_calls"]
    # The function: its unit converts at call 2 (the first hit); from call 3
    # on, every call is one native check.
    for before, after in steps[2:6]:
        assert after[0][0] - before[0][0] == 1 and after[0][2]
    # The module: float64 misses both results (nothing converts), b2 converts
    # the first, b5 the second; from then on each call is checked natively
    # as AOTCompiledModel checks (see the in-process test): b3 misses both
    # and checks the first again, b2 hits the first (checked twice), b5
    # misses the first and hits the second.
    module_steps = steps[6:]
    assert [b is None for b in module_steps[1][0][1:]] == [True, True]
    assert [b is None for b in module_steps[2][0][1:]] == [False, True]
    deltas = []
    for before, after in module_steps[3:]:
        assert all(a[2] for a in after[1:])
        deltas.append([a[0] - b[0] for b, a in zip(before[1:], after[1:])])
    assert deltas == [[2, 1], [2, 0], [1, 2]]


# --- torch._dynamo.package (caching precompile) -----------------------------------

_PACKAGE_SCRIPT = textwrap.dedent('''
    import json, sys
    import torch
    from torch._dynamo.package import CompilePackage, DiskDynamoStore

    from precompile_cases import f_n as f, x_

    mode, directory = sys.argv[1], sys.argv[2]
    store = DiskDynamoStore(directory + "/store")
    with torch._dynamo.config.patch(caching_precompile=True):
        if mode == "save":
            package = CompilePackage(f)
            torch._dynamo.optimize(backend="inductor", package=package)(f)(x_(3, 4), x_(3, 4), 2)
            store.save_package(package, "f")
            sys.exit(0)
        guardjit_on = mode == "guardjit"
        if guardjit_on:
            import guardjit
            from guardjit import _core, plugin
        entry = store.load_cache_entry("f")
        package = CompilePackage(f, entry.dynamo)
        c = torch._dynamo.optimize(package=package, backend="inductor")(f)
        package.install(entry.backends)
        out = {"answers": [], "calls": []}

        def calls():
            if not guardjit_on:
                return None
            plugin.wait_for_tier_up(120)
            (w,) = [u for u in plugin._live_units]
            return list(_core.guard_counters(w.guardjit_check))

        for i in range(4):
            x, y = x_(3, 4, seed=2 * i), x_(3, 4, seed=2 * i + 1)
            before = calls() if i else None
            out["answers"].append(torch.allclose(c(x, y, 2), f(x, y, 2)))
            out["calls"].append([before, calls()])
        # A miss: Dynamo would recompile; the stance makes it say why.
        with torch.compiler.set_stance("fail_on_recompile"):
            try:
                c(x_(3, 4, dtype=torch.float64), x_(3, 4), 2)
                out["miss"] = "no error"
            except RuntimeError as e:
                out["miss"] = str(e)
        # A cache entry would run its differentiating root here (no guard on
        # n: the n=2 graph for n=3); a precompile entry runs its full root.
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            try:
                x, y = x_(3, 4), x_(3, 4)
                out["stance"] = str(torch.allclose(c(x, y, 3), f(x, y, 3)))
            except RuntimeError as e:
                out["stance"] = str(e)
        if guardjit_on:
            out["precompile"] = guardjit.stats()["precompile"]
    print(json.dumps(out))
''')


def test_package_saved_then_loaded_in_a_fresh_process(tmp_path):
    """A unit of a torch._dynamo.package (installed with
    _load_precompile_entry, checked from Dynamo's C++ lookup) converts at its
    first check and is checked natively on each call after."""
    directory = str(tmp_path)
    script = tmp_path / "package.py"
    script.write_text(_PACKAGE_SCRIPT)

    def run(mode, guardjit_var):
        env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDJIT")}
        here = str(pathlib.Path(guardjit.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([here, HERE, *filter(None, [env.get("PYTHONPATH")])])
        if guardjit_var is not None:
            env["GUARDJIT"] = guardjit_var
        r = subprocess.run([sys.executable, str(script), mode, directory], env=env,
                           capture_output=True, text=True, timeout=900, cwd=directory)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1]) if mode != "save" else None

    run("save", None)
    plain = run("plain", None)
    gj = run("guardjit", "1")
    assert plain["answers"] == gj["answers"] == [True] * 4
    assert plain["miss"].startswith("Detected recompile when torch.compile stance is "
                                    "'fail_on_recompile'")
    assert gj["miss"] == plain["miss"]
    assert plain["stance"].startswith("Recompilation triggered with skip_guard_eval_unsafe")
    assert gj["stance"] == plain["stance"]
    p = gj["precompile"]
    assert (p["deferred"], p["converted_at_first_check"], p["pending"]) == (1, 1, 0)
    assert (p["units_live"], p["units_native"]) == (1, 1)
    # The first call converted the unit (Dynamo's tree answered it); each
    # later call is one native check, through the trampoline root; the miss
    # is one more check, which failed.
    for before, after in gj["calls"][1:]:
        assert after[0] - before[0] == 1 and after[2]
    assert p["check_calls"] == 3 + 2 and p["check_failures"] == 2
