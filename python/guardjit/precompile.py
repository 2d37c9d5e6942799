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
   unit; :func:`defer` takes that recording, keeps Dynamo's tree in
   ``dynamo_root`` and installs a root whose only guard is a trampoline: an
   instance of a class made for the unit, whose ``__call__`` is
   :func:`first_check` until the unit is decided.
2. The first check Dynamo's tree passes converts the unit on its frame
   locals: plugin._convert binds, compiles and verifies there exactly as for
   a fresh compile. Until then, and when the conversion declines (its reason
   is in ``stats()["fallback_reasons"]`` and ``stats()["precompile"]``),
   Dynamo's tree answers. Two callers reach it:

   - ``AOTCompiledFunction.guard_check`` (``aot_compile``,
     ``load_compiled_function``, ``AOTCompiledModel``) calls
     ``wrapper.check(f_locals)`` from Python with the dict
     ``prepare_f_locals`` built; after the conversion the wrapper's root is
     guardjit's, as for any converted unit.
   - ``torch._dynamo.package`` installs a loaded unit with
     ``_load_precompile_entry``, whose C++ entry reads ``wrapper.root`` once
     and calls it from Dynamo's lookup: it keeps calling the trampoline, whose
     class's ``__call__`` becomes guardjit's check followed, on a miss, by
     Dynamo's tree (step 3), or Dynamo's tree's ``check`` when the unit
     declined.
3. A miss of a precompiled unit's check also runs Dynamo's tree
   (``GuardJitManagerWrapper.check`` and the trampoline -> :func:`on_miss`),
   as plain torch's check did: its fail counts, which order the tree's
   accessors and so its printing and ``check_verbose``'s
   ``num_guards_executed``, move as in plain torch, and the error text on a
   miss is the same (``GuardManager check failed, reason: ...``, and the
   tree ``fail_on_recompile`` prints for precompile entries). Should Dynamo
   pass there, its answer is returned and the unit goes back to Dynamo's tree.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import weakref
from typing import Any, Callable

import torch._dynamo.guards as dynamo_guards
from torch._C._dynamo.guards import RootGuardManager

from guardjit import _core, recorder

log = logging.getLogger("guardjit")



@dataclasses.dataclass
class _Host:
    """What plugin.py lends this module (it imports this one: no circle)."""

    lock: Any  # plugin._lock: conversions run under it
    convert: Callable  # plugin._convert(wrapper, f_locals, code, deferred=)
    fallback: Callable  # plugin._fallback(name, guards, reason, ...)
    deferred_class: type  # plugin.DeferredManagerWrapper


_host: _Host | None = None


def connect(**host: Any) -> None:
    """Called once by plugin.py when it loads."""
    global _host
    _host = _Host(**host)


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
    trampoline: Any = None  # the class whose instance the deferred root calls


def defer(wrapper: Any, code: Any, name: str) -> None:
    """Keeps the unit's recording for :func:`first_check` (called from
    plugin._offer while the recorder still holds it) and installs its
    trampoline root."""
    dynamo_root = wrapper.root
    rec = recorder.take(dynamo_root)
    recorder.reset()
    ref = weakref.ref(wrapper)

    def first(f_locals: Any) -> bool:
        w = ref()
        return first_check(w, f_locals) if w is not None else dynamo_root.check(f_locals)

    # A class per unit: calling its instance looks ``__call__`` up on the
    # class each time, so a C++ entry that holds this root follows a later
    # assignment (first_check, on_miss).
    trampoline = type("GuardJitDeferredCheck", (), {"__call__": staticmethod(first)})
    root = RootGuardManager()
    root.add_lambda_guard(trampoline(), [f"guardjit: deferred check ({name})"], None)
    root.attach_compile_id(name)
    recorder.forget(root)  # guardjit's own root: not a recording
    d = wrapper.__dict__
    d["_guardjit_deferred"] = Deferred(name=name, code=code, rec=rec, trampoline=trampoline)
    # A C++ entry made from this wrapper (_load_precompile_entry) holds the
    # root's raw pointer; the wrapper owns the root for it, whatever ``root``
    # says later.
    d["_guardjit_entry_root"] = root
    d["dynamo_root"] = dynamo_root
    wrapper.__class__ = _host.deferred_class
    wrapper.root = root
    _pending.add(wrapper)
    _counters["deferred"] += 1


def first_check(wrapper: Any, f_locals: Any) -> bool:
    """Dynamo's answer; when it passes, converts the unit on ``f_locals``."""
    dynamo_root = wrapper.__dict__["dynamo_root"]
    answer = dynamo_root.check(f_locals)
    if not answer or type(f_locals) is not dict:
        # Nothing to verify a conversion against: wait for a passing call.
        return answer
    with _host.lock:
        deferred = wrapper.__dict__.pop("_guardjit_deferred", None)
        if deferred is None:  # another thread converted it meanwhile
            return answer
        _pending.discard(wrapper)
        # _convert starts from Dynamo's root on a plain wrapper (another
        # thread may still read ``dynamo_root``: it stays).
        wrapper.__class__ = dynamo_guards.GuardManagerWrapper
        wrapper.root = dynamo_root
        try:
            why = _host.convert(wrapper, f_locals, deferred.code, deferred=deferred)
        except Exception as e:  # never break a call torch answers
            why = _host.fallback(deferred.name, 0, f"internal error: {e!r}", unexpected=True)
        if why is None:
            _counters["converted_at_first_check"] += 1
            mark(wrapper)
            # guardjit's check, whose miss also runs Dynamo's tree (as the
            # wrapper's check does); an empty unit keeps Dynamo's empty root.
            target = _checked(weakref.ref(wrapper), wrapper.guardjit_check) \
                if wrapper.root is not dynamo_root else dynamo_root.check
        else:
            _counters["declined_at_first_check"] += 1
            _declined[why] += 1
            target = dynamo_root.check
        # A C++ entry that read the trampoline root calls this from now on.
        deferred.trampoline.__call__ = staticmethod(target)
        wrapper.__dict__["_guardjit_trampoline"] = deferred.trampoline
    return answer


def _checked(ref: Any, check: Any) -> Any:
    """What a C++ entry's trampoline root calls once its unit is converted:
    guardjit's ``check``, and on a miss Dynamo's tree (:func:`on_miss`)."""

    def checked(f_locals: Any) -> bool:
        if check(f_locals):
            return True
        w = ref()
        return w is not None and on_miss(w, f_locals)

    return checked


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
        trampoline = d.get("_guardjit_trampoline")
        if trampoline is not None:
            trampoline.__call__ = staticmethod(dynamo_root.check)
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
