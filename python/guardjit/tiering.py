"""The background tier: native checks recompiled off the calling thread.

A compile unit's check is first compiled on Dynamo's compile thread at
``plugin.config.opt_level`` (``light``: fast to compile, slower code). Its
callable is then queued for a recompile at the tier-up level (``O1``: the
greedy register allocator) on one background thread, which swaps the new
function in atomically; no call ever waits for LLVM (``python/src/TierUp.h``
gives the thread, GIL and lifetime rules). Levels are measured in
docs/performance.md, "Tiered compilation".
"""
from __future__ import annotations

import logging
from typing import Any

from guardjit import _core

log = logging.getLogger("guardjit")

OFF = ("", "off")


def schedule(check: Any, level: str) -> bool:
    """Queues ``check`` (a ``_core.make_guard`` callable running native code)
    for a recompile at ``level``. False when nothing was queued: tiering off
    (``level`` "off" or ""), the interpreter, or code already at that level.
    GIL held; returns at once."""
    if level in OFF:
        return False
    try:
        return bool(_core.tier_up(check, level))
    except Exception as e:  # e.g. a bad GUARDJIT_TIER_UP: keep the first code
        log.warning("guardjit: no background tier at %r: %s", level, e)
        return False


def wait(timeout_s: float | None = None) -> bool:
    """Blocks (GIL released) until every queued recompile is in place, at most
    ``timeout_s`` seconds; True when none is left."""
    return bool(_core.wait_tier_up(-1.0 if timeout_s is None else float(timeout_s)))


def level_of(check: Any) -> str | None:
    """The code level ('O0', 'light', 'O1', 'O2') ``check`` runs now; None
    for the interpreter."""
    return _core.guard_level(check)
