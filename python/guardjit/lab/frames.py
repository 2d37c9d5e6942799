"""Python frames a guard check enters.

A native check that calls into Python on every call cannot be much faster
than Dynamo's own tree, so the number of Python frames one check enters is a
reported statistic (docs/performance.md). It is counted the way the issue
that asked for it defines it: the ``"call"`` events ``sys.setprofile``
reports (Python frames only; C functions are ``"c_call"`` events and not
counted), nested calls included, around one call of a root's ``check`` on
the frame locals of a real call.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["count_python_frames", "python_frames_by_function"]


def _profile_calls(check: Callable[[Any], object], f_locals: Any) -> list[Any]:
    """The code objects of the Python frames entered by ``check(f_locals)``,
    in order, nested calls included. Restores the previous profile function
    (also when the check raises, which a guard check never does)."""
    codes: list[Any] = []
    me = threading.get_ident()

    def prof(frame: Any, event: str, _arg: Any) -> None:
        if event == "call" and threading.get_ident() == me:
            codes.append(frame.f_code)

    previous = sys.getprofile()
    sys.setprofile(prof)
    try:
        check(f_locals)
    finally:
        sys.setprofile(previous)
    return codes


def count_python_frames(check: Callable[[Any], object], f_locals: Any) -> int:
    """Python frames entered by one call ``check(f_locals)``.

    ``check`` is any callable taking the frame-locals dict: a
    ``RootGuardManager``'s ``check`` (Dynamo's tree, or the root guardjit
    installs), or guardjit's check function itself. Counts ``sys.setprofile``
    ``"call"`` events on this thread, nested calls included; the check's own
    result is discarded. Not thread-safe against other users of
    ``sys.setprofile`` on this thread (the previous profile function is put
    back afterwards, but does not see the calls in between).
    """
    return len(_profile_calls(check, f_locals))


def python_frames_by_function(check: Callable[[Any], object], f_locals: Any) -> dict[str, int]:
    """As :func:`count_python_frames`, per function: ``{"file:line name": n}``
    (for finding which guards still call Python)."""
    out: dict[str, int] = {}
    for code in _profile_calls(check, f_locals):
        key = f"{code.co_filename}:{code.co_firstlineno} {code.co_qualname}"
        out[key] = out.get(key, 0) + 1
    return out
