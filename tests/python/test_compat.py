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
