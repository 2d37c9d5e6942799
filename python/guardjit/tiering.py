"""The background tier: native checks compiled off the calling thread.

A compile unit's check first runs guardjit's interpreter (``start``): its
native code is compiled at ``plugin.config.opt_level`` (``O0``) on one background
thread and swapped in atomically, then recompiled at the tier-up level
(``O1``: the greedy register allocator) the same way; no call ever waits for
LLVM (``include/guardjit/Check/TierUp.h`` gives the thread, GIL and lifetime rules). The
first call of each new code also runs the interpreter and must agree with it.
With ``plugin.config.first_tier = "sync"`` the first code is compiled on
Dynamo's compile thread instead and ``schedule`` queues the tier-up. Levels
are measured in docs/performance.md, "Tiered compilation".
"""
from __future__ import annotations

import logging
from typing import Any

from guardjit import _core

log = logging.getLogger("guardjit")

OFF = ("", "off")
LEVELS = ("O0", "light", "O1", "O2")


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


def start(check: Any, level: str, then: str = "off") -> bool:
    """Interpreter first: queues the native compile of ``check`` (a
    ``_core.make_guard`` callable made without code) at ``level`` on the
    background thread, then a recompile at ``then`` once that code is in
    place (when ``then`` is a higher level; "off" for none). False when
    nothing was queued. GIL held; returns at once."""
    if then not in OFF and then not in LEVELS:
        log.warning("guardjit: no background tier at %r: not one of %s", then, LEVELS)
        then = "off"
    try:
        return bool(_core.start_native(check, level, "" if then in OFF else then))
    except Exception as e:  # e.g. a bad GUARDJIT_OPT: the interpreter stays
        log.warning("guardjit: no native code at %r: %s", level, e)
        return False


def wait(timeout_s: float | None = None) -> bool:
    """Blocks (GIL released) until every queued recompile is in place, at most
    ``timeout_s`` seconds; True when none is left."""
    return bool(_core.wait_tier_up(-1.0 if timeout_s is None else float(timeout_s)))


def level_of(check: Any) -> str | None:
    """The code level ('O0', 'light', 'O1', 'O2') ``check`` runs now; None
    for the interpreter."""
    return _core.guard_level(check)
