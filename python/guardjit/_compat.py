"""What guardjit has verified, and the check that refuses everything else.

guardjit reads CPython 3.11 object layouts and torch 2.13.0's guard-building
internals (torch/_dynamo/guards.py, torch._C._dynamo.guards). On anything else
it warns once and leaves torch's own guards in place.
"""

from __future__ import annotations

import sys
import warnings

VERIFIED_TORCH = "2.13.0"
VERIFIED_PYTHON = (3, 11)

_warned = False


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
    if torch.__version__.split("+")[0] != VERIFIED_TORCH:
        out.append(f"torch {torch.__version__} (verified: {VERIFIED_TORCH})")
        return out
    try:
        import torch._dynamo.guards as g
        from torch._C._dynamo import guards as C

        import inspect

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
