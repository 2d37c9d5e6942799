"""Precompiled artifacts: guard managers torch builds without its own check.

torch 2.13's precompile routes build a unit's guards through
``CheckFunctionManager`` like any compile, but when they *load* an artifact
(``torch.compiler.load_compiled_function``, ``AOTCompiledModel.deserialize``,
``AOTCompiledFunction.__post_init__`` and ``torch._dynamo.package``'s
``load_guard_manager``) the output graph carries ``skip_guards_check=True``:
there are no frame locals to check the tree on (torch/_dynamo/guards.py,
``serialize_guards`` sets it; ``CheckFunctionManager.__init__`` skips the
check, the testing hook and the profile). guardjit verifies every conversion
against Dynamo's answer on real frame locals, so such a unit is converted
later, at its first check:

1. At build (plugin._offer), the recorder has mirrored the tree as for any
   unit; :func:`defer` takes that recording and turns the wrapper into a
   :class:`DeferredManagerWrapper`. Its ``root`` stays Dynamo's tree.
2. ``AOTCompiledFunction.guard_check`` calls ``wrapper.check(f_locals)`` with
   the dict ``prepare_f_locals`` built. The first call Dynamo's tree passes
   is the conversion's compile-time frame locals: plugin._convert binds,
   compiles and verifies there exactly as for a fresh compile, then installs
   guardjit's root. Until then, and when the conversion declines, Dynamo's
   tree answers (its reason is in ``stats()["fallback_reasons"]``).
3. A miss of guardjit's check also runs Dynamo's tree
   (``GuardJitManagerWrapper.check`` -> :func:`on_miss`), as plain torch's
   check did: its fail counts, which order the tree's checks and so
   ``check_verbose``'s ``num_guards_executed``, move as in plain torch, and
   the error text on a miss is the same. Should Dynamo pass there, its answer
   is returned and the unit goes back to Dynamo's tree.

``torch._dynamo.package``'s entries are installed with
``_load_precompile_entry``, which reads ``wrapper.root`` once, in C++, and
checks it there: no Python call ever reaches ``check``, so those units stay on
Dynamo's tree and ``stats()["precompile"]["pending"]`` counts them.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import weakref
from typing import Any

import torch._dynamo.guards as dynamo_guards

from guardjit import _core, recorder

log = logging.getLogger("guardjit")

_counters: collections.Counter = collections.Counter()
_declined: collections.Counter = collections.Counter()
# Deferred wrappers still waiting for a first passing check.
_pending: weakref.WeakSet = weakref.WeakSet()
# Converted precompiled units still alive (at compile time or first check).
_converted: weakref.WeakSet = weakref.WeakSet()


@dataclasses.dataclass
class Deferred:
    """A unit's recording kept from its build until its first check."""

    name: str  # the compile id, or "precompiled <co_name>" outside a compile
    code: Any
    rec: Any  # recorder.Recording, or None when nothing was recorded


class DeferredManagerWrapper(dynamo_guards.GuardManagerWrapper):
    """A wrapper built without Dynamo's check: ``root`` is Dynamo's tree,
    and the first check it passes converts the unit (:func:`first_check`)."""

    def check(self, x: Any) -> bool:
        return first_check(self, x)


def defer(wrapper: Any, code: Any, name: str) -> None:
    """Keeps the unit's recording for :func:`first_check` (called from
    plugin._offer while the recorder still holds it)."""
    rec = recorder.take(wrapper.root)
    recorder.reset()
    wrapper.__dict__["_guardjit_deferred"] = Deferred(name=name, code=code, rec=rec)
    wrapper.__class__ = DeferredManagerWrapper
    _pending.add(wrapper)
    _counters["deferred"] += 1


def first_check(wrapper: Any, f_locals: Any) -> bool:
    """Dynamo's answer; when it passes, converts the unit on ``f_locals``."""
    answer = wrapper.root.check(f_locals)
    if not answer or type(f_locals) is not dict:
        # Nothing to verify a conversion against: wait for a passing call.
        return answer
    from guardjit import plugin

    with plugin._lock:
        deferred = wrapper.__dict__.pop("_guardjit_deferred", None)
        if deferred is None:  # another thread converted it meanwhile
            return answer
        _pending.discard(wrapper)
        wrapper.__class__ = dynamo_guards.GuardManagerWrapper
        try:
            why = plugin._convert(wrapper, f_locals, deferred.code, deferred=deferred)
        except Exception as e:  # never break a call torch answers
            why = plugin._fallback(deferred.name, 0, f"internal error: {e!r}", unexpected=True)
        if why is None:
            _counters["converted_at_first_check"] += 1
            mark(wrapper)
        else:
            _counters["declined_at_first_check"] += 1
            _declined[why] += 1
    return answer


def mark(wrapper: Any) -> None:
    """Counts ``wrapper`` (a GuardJitManagerWrapper) as a precompiled unit."""
    wrapper.__dict__["guardjit_precompiled"] = True
    _converted.add(wrapper)


def on_miss(wrapper: Any, x: Any) -> bool:
    """Runs after guardjit's check of ``wrapper`` failed on ``x``: Dynamo's
    tree answers too (see the module doc). Returns the answer."""
    dynamo_root = wrapper.__dict__.get("dynamo_root")
    if dynamo_root is None or not dynamo_root.check(x):
        return False
    _counters["miss_disagreements"] += 1
    log.warning("compile unit %s: guardjit's check failed where Dynamo's tree passes; "
                "the unit goes back to Dynamo's tree", getattr(wrapper, "guardjit_name", "?"))
    if wrapper.__dict__.get("cache_entry") is None:
        # A cache entry holds the root it read at its construction (C++):
        # only a wrapper checked from Python can be switched back.
        d = wrapper.__dict__
        d["root"] = dynamo_root
        d["diff_guard_root"] = dynamo_root
    return True


def stats() -> dict[str, Any]:
    """guardjit.stats()["precompile"]: units built without Dynamo's check
    and kept for their first check (deferred), converted or declined there
    (with reasons), still pending; the live precompiled units guardjit checks
    (converted at compile time, ``aot_compile``, or at their first check), how
    many run native code, and their check calls and failures
    (``_core.guard_counters``); misses where Dynamo's tree passed."""
    calls = failures = native = 0
    live = 0
    for w in list(_converted):
        check = w.__dict__.get("guardjit_check")
        if check is None or w.__dict__.get("root") is w.__dict__.get("dynamo_root"):
            continue
        live += 1
        c, f, n = _core.guard_counters(check)
        calls += c
        failures += f
        native += bool(n)
    return {
        "deferred": _counters["deferred"],
        "converted_at_first_check": _counters["converted_at_first_check"],
        "declined_at_first_check": _counters["declined_at_first_check"],
        "declined_reasons": dict(_declined),
        "pending": len(_pending),
        "units_live": live,
        "units_native": native,
        "check_calls": calls,
        "check_failures": failures,
        "miss_disagreements": _counters["miss_disagreements"],
    }
