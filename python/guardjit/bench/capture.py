"""Every compile unit a benchmark builds: both roots and the frame locals.

A hook in front of guardjit's (``plugin.observe_units``) keeps, per compile
unit, Dynamo's own ``RootGuardManager``, the root the cache entry runs
(guardjit's, or Dynamo's when the unit fell back) and the compile-time frame
locals dict, which :func:`fix_frame_locals` replaces by the frame locals at
entry of an eager call where it went stale.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

from guardjit import plugin
from guardjit.bench.corpus import BenchCase


@dataclasses.dataclass
class Captured:
    dynamo_root: Any  # Dynamo's RootGuardManager
    final_root: Any  # the root the cache entry runs (guardjit's or Dynamo's)
    f_locals: dict
    code: Any = None


def entry_locals(case: BenchCase, code: Any) -> dict | None:
    """The frame locals of ``code`` at entry, from one eager call of the model.

    The compile-time frame locals can be stale: a frame that mutates its
    own ``kwargs`` (transformers' output wrappers do) leaves a dict that no
    longer passes the guards built at entry. Containers are copied at entry.
    """
    got: dict[str, dict] = {}

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code and "v" not in got:
            got["v"] = {k: (type(v)(v) if type(v) in (dict, list) else v)
                        for k, v in frame.f_locals.items()}

    args, kwargs = case.inputs()
    sys.setprofile(prof)
    try:
        case.model(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return got.get("v")


@contextlib.contextmanager
def capture_units() -> Iterator[list[Captured]]:
    """Keeps, per compile unit built inside, both roots and the frame locals.

    guardjit reports every unit it is offered (``plugin.observe_units``) with
    Dynamo's root and the root its cache entry runs; a hook another program
    sets in ``guard_manager_testing_hook_fn`` changes nothing.
    """
    plugin.install_hooks()
    got: list[Captured] = []

    def seen(dynamo_root: Any, final_root: Any, f_locals: Any, code: Any) -> None:
        got.append(Captured(dynamo_root, final_root, f_locals, code))

    with plugin.observe_units(seen):
        yield got


@contextlib.contextmanager
def keep_units() -> Iterator[None]:
    plugin.clear_units()
    plugin.config.keep_units = True
    try:
        yield
    finally:
        plugin.config.keep_units = False


def fix_frame_locals(case: BenchCase, captured: list[Captured]) -> int:
    """Makes every captured unit's frame locals pass both its roots, taking
    them at frame entry of an eager call where the compile-time dict went
    stale (entry_locals). Returns how many were recaptured."""
    recaptured = 0
    for c in captured:
        if c.dynamo_root.check(c.f_locals) and c.final_root.check(c.f_locals):
            continue
        fl = entry_locals(case, c.code) if c.code is not None else None
        if fl is None or not (c.dynamo_root.check(fl) and c.final_root.check(fl)):
            raise RuntimeError("a check fails on its compile-time frame locals and on "
                               "the frame locals of an eager call")
        c.f_locals = fl
        recaptured += 1
    return recaptured
