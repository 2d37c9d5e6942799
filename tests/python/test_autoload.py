"""GUARDJIT=1 activates lazily (issue 13, item 6).

The start-up hook (guardjit-autoload.pth -> _guardjit_autoload) must not load
torch or guardjit in a process that never imports Dynamo, must install
guardjit when Dynamo is first imported, and must never print a traceback.

Each test runs a fresh interpreter. The hermetic ones start it with ``-S``
and process only the site directory this guardjit is installed in (its .pth
and hook), with torch's directory appended to ``sys.path`` without running
any other .pth: another guardjit installed on the machine (an older .pth in
the system site-packages of a ``--system-site-packages`` venv) cannot change
what they see. The last test runs the interpreter as a user does.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

import guardjit

SITE = str(pathlib.Path(guardjit.__file__).resolve().parent.parent)
TORCH_SITE = str(pathlib.Path(torch.__file__).resolve().parent.parent)
PTH = pathlib.Path(SITE) / "guardjit-autoload.pth"


def _env(guardjit_var: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDJIT")}
    if guardjit_var is not None:
        env["GUARDJIT"] = guardjit_var
    return env


def _hermetic(body: str, guardjit_var: str | None = "1", site: str = SITE,
              prelude: str = "") -> subprocess.CompletedProcess:
    script = textwrap.dedent(f"""
        import site, sys
        {prelude}
        site.addsitedir({site!r})
        STARTUP = sorted(m for m in ("torch", "guardjit", "_guardjit_autoload")
                         if m in sys.modules)
        sys.path.append({TORCH_SITE!r})
    """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-S", "-c", script], env=_env(guardjit_var),
                          capture_output=True, text=True, timeout=300, cwd="/")


def test_pth_and_hook_are_installed_beside_each_other():
    assert PTH.is_file()
    assert (pathlib.Path(SITE) / "_guardjit_autoload.py").is_file()
    assert "_guardjit_autoload" in PTH.read_text()


def test_start_up_loads_neither_torch_nor_guardjit():
    r = _hermetic("print(STARTUP, sorted(m for m in sys.modules if m.startswith('torch')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["['_guardjit_autoload']", "[]"]
    assert r.stderr == ""  # torch is not importable yet at that point: no traceback


def test_without_the_variable_nothing_is_hooked():
    r = _hermetic("print(STARTUP); import torch._dynamo; print('guardjit' in sys.modules)",
                  guardjit_var=None)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["[]", "False"]


def test_importing_dynamo_installs_guardjit():
    r = _hermetic("""
        import torch
        print("after torch:", "guardjit" in sys.modules)
        import torch._dynamo
        plugin = sys.modules.get("guardjit.plugin")
        print("after dynamo:", plugin is not None and plugin.config.route_all)
        # the import hook is gone, and the loaders are torch's own again
        print("loaders:", type(torch.__loader__).__name__,
              type(torch._dynamo.__spec__.loader).__name__,
              any(type(f).__name__ == "_Finder" for f in sys.meta_path))
        import guardjit
        from guardjit import models
        case = models.two_input_mlp()
        out = torch.compile(case.model, backend="eager")(*case.make_input())
        print("units:", guardjit.stats()["units_native"])
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "after torch: False", "after dynamo: True",
        "loaders: SourceFileLoader SourceFileLoader False", "units: 1"]
    assert r.stderr == ""


def test_torch_compile_alone_activates_it():
    # torch.compile imports Dynamo itself: the usual first contact.
    r = _hermetic("""
        import torch
        f = torch.compile(lambda x: x * 2 + 1, backend="eager")
        print(f(torch.ones(3)).tolist())
        print(sys.modules["guardjit"].stats()["units_native"])
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["[3.0,", "3.0,", "3.0]", "1"]


def test_guardjit_module_importing_dynamo_first_waits_for_itself():
    # plugin imports Dynamo from inside its own import: guardjit is installed
    # when plugin has finished, not while it is half-imported.
    r = _hermetic("""
        from guardjit import plugin
        print("route_all:", plugin.config.route_all)
        import torch, guardjit
        from guardjit import models
        case = models.two_input_mlp()
        torch.compile(case.model, backend="eager")(*case.make_input())
        print("units:", guardjit.stats()["units_native"])
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["route_all: True", "units: 1"]
    assert r.stderr == ""


def test_unimportable_guardjit_is_one_line_and_torch_still_works(tmp_path):
    # A site directory with the .pth and the hook but a guardjit that cannot
    # be imported (as in a venv where another guardjit's .pth is processed).
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    for f in ("guardjit-autoload.pth", "_guardjit_autoload.py"):
        (site_dir / f).write_text((pathlib.Path(SITE) / f).read_text())
    broken = tmp_path / "broken" / "guardjit"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('simulated: no _core here')\n")
    r = _hermetic("""
        import torch
        f = torch.compile(lambda x: x - 1, backend="eager")
        print(f(torch.ones(2)).tolist())
    """, site=str(site_dir), prelude=f"sys.path.insert(0, {str(broken.parent)!r})")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["[0.0,", "0.0]"]
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("guardjit: GUARDJIT=1 but guardjit"), r.stderr
    assert "simulated" in lines[0] and "Traceback" not in r.stderr


def _stale_pth_files() -> list[str]:
    """guardjit-autoload.pth files of other installs that this interpreter
    also processes (with --system-site-packages) and that differ from ours."""
    import site

    ours = PTH.read_text()
    dirs = set(site.getsitepackages()) | {site.getusersitepackages()} | set(sys.path)
    return sorted(str(p) for d in dirs if (p := pathlib.Path(d) / PTH.name).is_file()
                  and p.resolve() != PTH.resolve() and p.read_text() != ours)


def test_as_a_user_runs_it():
    stale = _stale_pth_files()
    if stale:
        pytest.skip(f"another guardjit's start-up hook imports torch: {stale}")
    r = subprocess.run([sys.executable, "-c", 'import sys; print("torch" in sys.modules)'],
                       env=_env("1"), capture_output=True, text=True, timeout=300, cwd="/")
    assert (r.returncode, r.stdout, r.stderr) == (0, "False\n", "")
