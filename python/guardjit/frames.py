"""Python frames one guard check enters (the issue-12 statistic).

A frame is a ``"call"`` event of :func:`sys.setprofile`: one per Python
function (or generator / coroutine resumption) entered, nested calls
included. C functions (``"c_call"``) are not frames. The count is taken
around exactly one call of ``check(f_locals)``, typically a cache entry's
root ``check`` (``RootGuardManager.check``) on the frame locals of a real
call, so Dynamo's tree and guardjit's root can be compared on the same dict.

Both functions install their own profile function for the duration of the
call and restore the previous one (``sys.getprofile()``) afterwards, so they
nest under a profiler that is already running. GIL: called from Python;
they only count events of the calling thread.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable
from typing import Any


def python_frames(check: Callable[[Any], object], f_locals: Any) -> collections.Counter:
    """Frames entered by one ``check(f_locals)``, by code ``co_qualname``
    (``"<file>:<qualname>"`` keys, file base name only)."""
    seen: collections.Counter = collections.Counter()

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            seen[f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_qualname}"] += 1

    previous = sys.getprofile()
    sys.setprofile(prof)
    try:
        check(f_locals)
    finally:
        sys.setprofile(previous)
    return seen


def count_python_frames(check: Callable[[Any], object], f_locals: Any) -> int:
    """The number of Python frames one ``check(f_locals)`` enters."""
    return sum(python_frames(check, f_locals).values())


__all__ = ["count_python_frames", "python_frames"]
