"""On a torch / Python guardjit has not verified it warns once and leaves
torch's own guards in place."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(code: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, timeout=600)


def test_unverified_torch_version_warns_once_and_keeps_torch_guards():
    r = _run("""
        import warnings, torch
        torch.__version__ = "2.99.0"
        import guardjit
        from guardjit import models
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            case = models.two_input_mlp()
            m = guardjit.compile(case.model, backend="eager")
            out = m(*case.make_input())
            m(*case.make_input())
            assert not guardjit.install()
        msgs = [str(x.message) for x in w if "guardjit is disabled" in str(x.message)]
        assert len(msgs) == 1, msgs
        assert "2.99.0" in msgs[0]
        assert guardjit.stats() == {}
        print("OK")
    """)
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout


def test_environment_variable_routes_every_torch_compile():
    r = _run("""
        import torch
        import guardjit  # the .pth start-up hook already imported it with GUARDJIT=1
        from guardjit import models
        case = models.two_input_mlp()
        torch.compile(case.model, backend="eager")(*case.make_input())
        s = guardjit.stats()
        assert s["units_native"] == 1, s
        print("OK")
    """, {"GUARDJIT": "1"})
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout


def test_core_built_for_another_torch_build_is_refused_before_loading():
    """The build record (guardjit/_build_info.py) names another torch build:
    guardjit warns, keeps torch's guards and never loads _core."""
    r = _run("""
        import sys, warnings, torch
        import guardjit._build_info as built
        built.TORCH_GIT_VERSION = "0" * 40
        import guardjit
        from guardjit import models
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            case = models.two_input_mlp()
            m = guardjit.compile(case.model, backend="eager")
            m(*case.make_input())
        msgs = [str(x.message) for x in w if "guardjit is disabled" in str(x.message)]
        assert len(msgs) == 1 and "built against torch" in msgs[0], msgs
        assert torch.__version__ in msgs[0], msgs
        assert "guardjit._core" not in sys.modules
        assert guardjit.stats() == {}
        print("OK")
    """)
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout


def test_build_record_matches_core():
    import torch

    from guardjit import _build_info, _core

    assert (_core.TORCH_VERSION, _core.TORCH_GIT_VERSION, _core.TORCH_CXX11_ABI) == (
        _build_info.TORCH_VERSION, _build_info.TORCH_GIT_VERSION, _build_info.TORCH_CXX11_ABI)
    assert _core.TORCH_VERSION == torch.__version__


OTHER_PYTHON = __import__("os").environ.get("GUARDJIT_OTHER_PYTHON")


@pytest.mark.skipif(not OTHER_PYTHON, reason="GUARDJIT_OTHER_PYTHON names no interpreter with "
                    "guardjit built for another torch (scripts/test.sh sets it when one exists)")
def test_core_built_for_the_other_release_refuses_this_one(tmp_path):
    """guardjit as installed for the other torch release, imported here: it
    refuses loudly (warning, ImportError from _core itself) and torch.compile
    keeps torch's own guards."""
    import shutil

    import torch

    where = subprocess.run(
        [OTHER_PYTHON, "-c", "import importlib.util as u, os, guardjit._build_info as b; "
         "print(os.path.dirname(u.find_spec('guardjit').origin)); print(b.TORCH_VERSION)"],
        capture_output=True, text=True, timeout=600)
    assert where.returncode == 0, where.stderr
    pkg, other_version = where.stdout.split()
    assert other_version != torch.__version__, "the other interpreter has this torch"
    shutil.copytree(pkg, tmp_path / "guardjit")
    r = _run(f"""
        import sys, warnings, torch
        import guardjit
        assert guardjit.__file__.startswith({str(tmp_path)!r}), guardjit.__file__
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert not guardjit.enabled()
        msg = str(w[0].message)
        assert "built against torch {other_version}" in msg and torch.__version__ in msg, msg
        try:
            import guardjit._core
        except ImportError as e:
            print("core refused:", str(e)[:200])
        else:
            raise AssertionError("_core loaded under another torch")
        from torch._dynamo.testing import CompileCounter
        cnt = CompileCounter()
        f = torch.compile(lambda x: x + 1, backend=cnt)
        f(torch.ones(2)); f(torch.ones(2)); f(torch.ones(3, 3))
        assert cnt.frame_count == 2, cnt.frame_count
        assert not guardjit.install()
        assert guardjit.stats() == {{}}
        print("OK")
    """, {"PYTHONPATH": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout and "core refused" in r.stdout
