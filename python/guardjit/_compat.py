"""What guardjit has verified, and the check that refuses everything else.

guardjit reads CPython 3.11 object layouts and the guard-building internals of
two torch releases, 2.13.0 and 2.14.1 (torch/_dynamo/guards.py,
torch._C._dynamo.guards; what differs between them: docs/porting.md). Its
``_core`` is compiled against one torch build's headers and libraries, recorded
in ``guardjit/_build_info.py``. On any other torch, Python, or a torch other
than the one ``_core`` was built against, guardjit warns once and leaves
torch's own guards in place; ``_core`` is not even loaded then.
"""

from __future__ import annotations

import functools
import sys
import warnings

VERIFIED_TORCH = ("2.13.0", "2.14.1")
VERIFIED_PYTHON = (3, 11)

_warned = False


def torch_release() -> str:
    """The running torch's release without its local part ("2.14.1")."""
    import torch

    return torch.__version__.split("+")[0]


def at_least(release: str) -> bool:
    """True when the running torch is ``release`` or newer (by number)."""
    return _release_tuple(torch_release()) >= _release_tuple(release)


@functools.cache
def _release_tuple(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in release.split(".")[:3] if p.isdigit())


def build_mismatch() -> str | None:
    """Why guardjit's ``_core`` cannot run under the imported torch, from the
    build record alone (no ``_core`` load), or None when it was built for it."""
    import torch

    try:
        from guardjit import _build_info as built
    except ImportError:
        return "guardjit was installed without guardjit/_build_info.py (rebuild it)"
    running = (str(torch.__version__), str(torch.version.git_version),
               bool(torch.compiled_with_cxx11_abi()))
    recorded = (built.TORCH_VERSION, built.TORCH_GIT_VERSION, built.TORCH_CXX11_ABI)
    if running == recorded:
        return None
    return (f"guardjit._core was built against torch {recorded[0]} (git {recorded[1][:12]}, "
            f"cxx11abi={int(recorded[2])}) but this process runs torch {running[0]} "
            f"(git {running[1][:12]}, cxx11abi={int(running[2])}); rebuild guardjit against "
            "this torch: pip install --no-build-isolation --no-deps --force-reinstall .")


def problems() -> list[str]:
    """Reasons guardjit cannot run here (empty when it can)."""
    out: list[str] = []
    if sys.version_info[:2] != VERIFIED_PYTHON:
        out.append(f"Python {sys.version_info.major}.{sys.version_info.minor} "
                   f"(verified: {VERIFIED_PYTHON[0]}.{VERIFIED_PYTHON[1]})")
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is a dependency
        return out + [f"torch cannot be imported: {e}"]
    if torch_release() not in VERIFIED_TORCH:
        out.append(f"torch {torch.__version__} (verified: {', '.join(VERIFIED_TORCH)})")
        return out
    mismatch = build_mismatch()
    if mismatch:
        return out + [mismatch]
    try:
        import inspect

        import torch._dynamo.guards as g
        from torch._C._dynamo import guards as C

        # plugin.py wraps CheckFunctionManager.__init__ and reads these.
        params = list(inspect.signature(g.CheckFunctionManager.__init__).parameters)
        if params[:3] != ["self", "f_code", "output_graph"]:
            out.append(f"CheckFunctionManager.__init__{tuple(params)} changed")
        if not hasattr(C.RootGuardManager, "add_lambda_guard"):
            out.append("RootGuardManager.add_lambda_guard is missing")
        if "root" not in g.GuardManagerWrapper().__dict__:
            out.append("GuardManagerWrapper has no 'root' attribute")
    except Exception as e:
        out.append(f"torch._dynamo guard internals changed: {e!r}")
    try:
        from guardjit import _core

        if (_core.PY_VERSION_HEX >> 16) != (sys.hexversion >> 16):
            out.append("guardjit._core was built for another CPython")
    except ImportError as e:
        out.append(f"guardjit._core cannot be loaded: {e}")
    return out


def verified() -> bool:
    """True if guardjit may install itself; otherwise warns once."""
    global _warned
    found = problems()
    if found and not _warned:
        _warned = True
        warnings.warn("guardjit is disabled, torch.compile keeps its own guards: "
                      + "; ".join(found), RuntimeWarning, stacklevel=3)
    return not found
