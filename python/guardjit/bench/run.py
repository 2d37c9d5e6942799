"""Measurements of ``python -m guardjit bench`` (docs/performance.md, "How it is measured").

Per model, in one process:

1. **Guard check** (backend ``eager``; the guards do not depend on the
   backend). The model is compiled with ``guardjit.compile``; a hook in front
   of guardjit's keeps, per compile unit, Dynamo's own ``RootGuardManager``,
   the root the cache entry runs (guardjit's, or Dynamo's when the unit fell
   back) and the compile-time frame locals dict. Both roots are checked on
   that same dict, interleaved (:func:`guardjit.lab.timing.interleaved`): hot
   (repeated calls) and cold (a cache-flushing sweep before each timed call).
   For a model with several compile units, one A call checks every unit once.
2. **Cache lookup and end to end.** ``torch.compile`` and ``guardjit.compile``
   of the same module live side by side (``--backend``, default ``eager``: the guards and the lookup
   are the same with ``inductor``, which only changes the model's own time);
   rounds alternate between them. Per round, N calls run under
   ``torch.profiler`` and the self CPU time of the "TorchDynamo Cache Lookup"
   events is divided by N; then the whole call is timed interleaved without
   the profiler.
3. **The guide's options** (guard check as in 1, one compile each):
   ``install_free_tensors``, the six ``guard_filter_fn`` filters of
   ``torch.compiler``, ``use_recursive_dict_tags_for_guards``; and the
   ``skip_guard_eval_unsafe`` stance, whose cache lookup and call time are
   measured on the two compiled models of step 2. ``UNSAFE``
   (``install_free_tensors`` and ``skip_guard_on_all_nn_modules_unsafe``
   together) is a third ``torch.compile`` side of step 2: torch's check and
   lookup under both options against guardjit's sound (default) check and
   lookup, interleaved.
4. **Users' terms** (:func:`floor_fields`, from steps 2 and 3): the whole
   call against torch with no guards (``floor_call_us``,
   ``call_overhead_vs_floor``), the unsafe options' lookup beside guardjit's
   (``lookup_us_unsafe``) and the lookup per repeated layer
   (``lookup_per_layer_us``).

Per model, ``python_frames_dynamo`` / ``python_frames_guardjit`` count the
Python frames one check of each root enters on the same frame locals
(:mod:`guardjit.lab.frames`).

Everything runs under ``torch.no_grad()`` (a serving loop). A step that fails
is recorded with its error; a compile unit left on Dynamo's path is recorded
with guardjit's reason. Nothing here raises for one model.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch

import guardjit
from guardjit import _core, plugin
from guardjit.bench.capture import (Captured, capture_units, entry_locals, fix_frame_locals,
                                    keep_units)
from guardjit.bench.corpus import BenchCase
from guardjit.bench.lookup import LOOKUP_EVENT, profile_lookup_us, raw_self_us  # noqa: F401
from guardjit.bench.options import (FILTERS, FLOOR, LOOKUP_OPTIONS, OPTIONS, STANCE, UNSAFE,
                                    option_kwargs)
from guardjit.bench.passes import measure_passes
from guardjit.lab import timing

# Fields every model entry carries (the test checks them).
MODEL_FIELDS = ("name", "guards", "dynamo_check_us", "guardjit_check_us", "ratio",
                "guardjit_full_check_us", "lookup_us_torch", "lookup_us_guardjit",
                "lookup_us_guardjit_full", "call_us_torch", "call_us_guardjit",
                "compile_ms", "python_frames_dynamo", "python_frames_guardjit", "options",
                "floor_call_us", "call_overhead_vs_floor", "lookup_us_unsafe", "layers",
                "lookup_per_layer_us")
# torch 2.13 serves a guardless cache entry before the "TorchDynamo Cache
# Lookup" event starts (try_lookup_without_guard_eval in
# torch/csrc/dynamo/eval_frame_cpp.cpp): the profiler sees no lookup at all.
GUARDLESS_NOTE = ("torch serves a guardless entry outside the 'TorchDynamo Cache Lookup' "
                  "event (try_lookup_without_guard_eval): no lookup event is recorded, so "
                  "the whole call is timed instead (call_us, beside guardjit's call_us_guardjit)")


@dataclasses.dataclass
class Settings:
    rounds: int = 21  # interleaved rounds of the hot guard check
    target_ms: float = 2.0  # one batch of calls per round takes about this
    cold_rounds: int = 7
    cold_calls: int = 20  # timed calls per cold round, each after a flush
    profile_rounds: int = 3  # profiler rounds per side
    profile_calls: int = 30  # calls per profiler round
    call_rounds: int = 9  # end-to-end rounds
    option_rounds: int = 11
    e2e_backend: str = "eager"
    opt_level: str = "O0"  # plugin.Config's default
    quick: bool = False
    # Only the default-options check, lookup, end to end and UNSAFE (no other
    # option, no passes): for before/after pairs run alternately.
    core: bool = False

    @classmethod
    def quick_mode(cls) -> Settings:
        return cls(rounds=5, target_ms=0.5, cold_rounds=2, cold_calls=5, profile_rounds=2,
                   profile_calls=20, call_rounds=3, option_rounds=3, e2e_backend="eager",
                   quick=True)


def _wait_for_tier_up() -> dict[str, Any]:
    """Waits until the background tier replaced every check compiled so far
    (the steady state a serving loop reaches), returning the wait (ms) and
    the background compile time spent meanwhile (ms)."""
    before = _core.tier_up_stats()["compile_ms"]
    start = time.perf_counter()
    plugin.wait_for_tier_up()
    return {"tier_up_wait_ms": (time.perf_counter() - start) * 1e3,
            "tier_up_compile_ms": _core.tier_up_stats()["compile_ms"] - before}


# --- timing helpers ----------------------------------------------------------------

class _Direct:
    """Gives a bare callable a ``check`` method (for :func:`_checks`)."""

    def __init__(self, fn: Callable[[dict], object]) -> None:
        self.check = fn


def _checks(pairs: list[tuple[Any, dict]]) -> Callable[[], object]:
    """One call checks every (root, f_locals) pair once."""
    if len(pairs) == 1:
        root, fl = pairs[0]
        check = root.check
        return lambda: check(fl)
    checks = [(r.check, fl) for r, fl in pairs]

    def run() -> None:
        for c, fl in checks:
            c(fl)
    return run


_FLUSH = bytearray(16 << 20)  # larger than the L2 of the machines we run on


def _flush() -> None:
    # Touch one byte per 64-byte line: evicts the guarded objects from L1/L2.
    _FLUSH[::64] = _FLUSH[1::64]


def cold_interleaved(a: Callable[[], object], b: Callable[[], object], rounds: int,
                     calls: int) -> dict[str, float]:
    """Per-call µs of A and B with the caches flushed before every call."""
    pc = time.perf_counter_ns
    a_med, b_med, ratios = [], [], []
    for r in range(rounds + 1):
        ta, tb = [], []
        for _ in range(calls):
            _flush()
            s = pc(); a(); ta.append(pc() - s)
            _flush()
            s = pc(); b(); tb.append(pc() - s)
        if r == 0:
            continue  # warm-up
        ma, mb = statistics.median(ta), statistics.median(tb)
        a_med.append(ma / 1e3)
        b_med.append(mb / 1e3)
        ratios.append(ma / max(mb, 1))
    return {"a_us": statistics.median(a_med), "b_us": statistics.median(b_med),
            "ratio": statistics.median(ratios)}


def interleaved_lookups(fns: list[Callable[[], object]], rounds: int, calls: int,
                        events: list[list[int]] | None = None,
                        pregraph: list[list[float]] | None = None) -> list[list[float]]:
    """Per side, the lookup µs of each round; sides alternate within a round.
    With ``events``, also per side the lookup events seen in each round
    (``calls`` each when every call went through the lookup); with
    ``pregraph``, per side the pre-graph bytecode µs per call of each round."""
    for fn in fns:
        profile_lookup_us(fn, max(1, calls // 4))  # warm-up (profiler start-up, caches)
    per: list[list[float]] = [[] for _ in fns]
    if events is not None:
        events[:] = [[] for _ in fns]
    if pregraph is not None:
        pregraph[:] = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            counted: list[int] = []
            pre: list[float] | None = None if pregraph is None else pregraph[i]
            per[i].append(profile_lookup_us(fn, calls, counted, pre))
            if events is not None:
                events[i].append(counted[0])
    return per


def _ratio_stats(xs: list[float], ys: list[float]) -> dict[str, float]:
    ratios = [x / y if y else float("nan") for x, y in zip(xs, ys)]
    return {"a_us": statistics.median(xs), "b_us": statistics.median(ys),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios)}


def interleaved_lookup(a: Callable[[], object], b: Callable[[], object], rounds: int,
                       calls: int) -> dict[str, float]:
    la, lb = interleaved_lookups([a, b], rounds, calls)
    return _ratio_stats(la, lb)


def _ab(r: timing.ABResult) -> dict[str, float]:
    return {"a_us": r.a_us, "b_us": r.b_us, "ratio": r.ratio, "ratio_min": r.ratio_min,
            "ratio_max": r.ratio_max, "batch": r.batch, "rounds": r.rounds}


def _err(e: BaseException) -> str:
    msg = f"{type(e).__name__}: {e}".strip()
    return msg.splitlines()[0][:300] if msg else type(e).__name__


# --- step 1: the guard check -----------------------------------------------------------

def python_frames(captured: list[Captured]) -> dict[str, Any]:
    """Python frames one check of each root enters on the same frame locals
    (guardjit.lab.frames), summed over the units, with guardjit's by function."""
    from guardjit import pyattr
    from guardjit.lab.frames import python_frames_by_function as frames_by_code

    dyn, gj = collections.Counter(), collections.Counter()
    before = pyattr.stats()
    for c in captured:
        dyn.update(frames_by_code(c.dynamo_root.check, c.f_locals))
        gj.update(frames_by_code(c.final_root.check, c.f_locals))
    after = pyattr.stats()
    return {"python_frames_dynamo": sum(dyn.values()),
            "python_frames_guardjit": sum(gj.values()),
            "python_frames_dynamo_by_code": dict(dyn.most_common(8)),
            "python_frames_guardjit_by_code": dict(gj.most_common(8)),
            # Reads in one check of guardjit's roots whose type runs
            # nn.Module.__getattr__ or a transformers config
            # __getattribute__, decided natively / handed to CPython.
            "python_accessor_reads": {k: after[k] - before[k] for k in after}}


def _skip_counters(checks: list[Any]) -> dict[str, int]:
    """Subtree-skipping counters summed over ``checks`` (make_guard
    callables; those without a plan count nothing)."""
    out = collections.Counter()
    for ch in checks:
        st = _core.skip_stats(ch)
        if st is not None:
            out["units"] += 1
            for k in ("hits", "fallbacks", "subtrees", "implied_guards", "residual_guards"):
                out[k] += st[k]
    return out


@contextlib.contextmanager
def subtree_skip(on: bool) -> Iterator[None]:
    """guardjit's subtree skipping on or off for the units compiled inside
    (plugin.config.subtree_skip is read when a unit is built)."""
    saved = plugin.config.subtree_skip
    plugin.config.subtree_skip = on
    try:
        yield
    finally:
        plugin.config.subtree_skip = saved


def measure_full_check(case: BenchCase, s: Settings, default_check: Callable[[], object],
                       captured: list[Captured], checks: list[Any]) -> dict[str, Any]:
    """guardjit's full check (subtree skipping off) against its default.

    A second guardjit side of the same model, compiled with skipping off
    under a backend of its own (so Dynamo gives it a cache entry of its own,
    SideBackend); its roots join ``captured``. Both checks are interleaved on
    their own compile-time frame locals, after the background tier. Returns
    ``guardjit_full_check_us``, ``skip_check_speedup`` (full / default, the
    median of the per-round ratios) and the skipping counters of the default
    side's ``checks`` over the timed calls (``skip_hits`` > 0 when its
    number is the skipping one; ``skip_units`` 0 when every unit declined,
    with the reasons guardjit.stats() counts).
    """
    first = len(captured)
    with subtree_skip(False):
        full = guardjit.compile(case.model, backend=SideBackend("eager", "guardjit-full"))
        args, kwargs = case.inputs()
        full(*args, **kwargs)
        full(*args, **kwargs)
    plugin.wait_for_tier_up()
    caps = captured[first:]
    if not caps:
        return {"guardjit_full_check_us": None, "skip_note": "the full side built no unit"}
    fix_frame_locals(case, caps)
    c = _checks([(u.final_root, u.f_locals) for u in caps])
    before = _skip_counters(checks)
    r = timing.interleaved(c, default_check, rounds=max(5, s.rounds // 2), target_ms=s.target_ms)
    after = _skip_counters(checks)
    return {"guardjit_full_check_us": r.a_us, "guardjit_default_check_us_vs_full": r.b_us,
            "skip_check_speedup": r.ratio, "skip_check_speedup_min": r.ratio_min,
            "skip_check_speedup_max": r.ratio_max,
            "skip_hits": after["hits"] - before["hits"],
            "skip_fallbacks": after["fallbacks"] - before["fallbacks"],
            "skip_units": after["units"], "skip_subtrees": after["subtrees"],
            "skip_implied_guards": after["implied_guards"],
            "skip_residual_guards": after["residual_guards"],
            "skip_declined": sorted({u.skip_declined for u in plugin.units()
                                     if u.skip_declined and u.check in checks})}


def measure_checks(case: BenchCase, s: Settings, compile_kwargs: dict | None = None,
                   dynamo_config: dict | None = None, cold: bool = True,
                   rounds: int | None = None, full: bool = False) -> dict[str, Any]:
    """Compiles ``case`` with guardjit (eager) and times both checks; with
    ``full``, also guardjit's full check (measure_full_check)."""
    torch._dynamo.reset()
    out: dict[str, Any] = {}
    reasons_before = dict(guardjit.stats().get("fallback_reasons", {}))
    cfg = torch._dynamo.config.patch(**(dynamo_config or {}))
    with cfg, keep_units(), capture_units() as captured:
        model = guardjit.compile(case.model, backend="eager", **(compile_kwargs or {}))
        args, kwargs = case.inputs()
        model(*args, **kwargs)
        model(*args, **kwargs)  # a second call must hit (no recompile)
        out.update(_wait_for_tier_up())
        units = plugin.units()
        reasons_after = dict(guardjit.stats().get("fallback_reasons", {}))
        fallback = [u.reason for u in units if u.status == "dynamo"]
        new_reasons = {k: v - reasons_before.get(k, 0) for k, v in reasons_after.items()
                       if v - reasons_before.get(k, 0) > 0}
        guards = sum(u.guards for u in units)
        out.update({
            "guards": guards,
            "units": len(captured),
            "units_native": sum(u.status == "native" for u in units),
            "units_interpreter": sum(u.status == "interpreter" for u in units),
            "units_dynamo": sum(u.status == "dynamo" for u in units),
            "python_guards": sum(u.python_guards for u in units),
            "compile_ms": sum(u.compile_ms for u in units),
            "fallback_reasons": fallback or sorted(new_reasons),
            "status": ("native" if units and not fallback else
                       "fallback" if units and len(fallback) == len(units) else
                       "partial" if units else "no compile unit"),
        })
        recaptured = fix_frame_locals(case, captured)
        out["frame_locals"] = "recaptured at entry" if recaptured else "compile time"
        a = _checks([(c.dynamo_root, c.f_locals) for c in captured])
        b = _checks([(c.final_root, c.f_locals) for c in captured])
        if not captured:
            out.update({"dynamo_check_us": 0.0, "guardjit_check_us": 0.0, "ratio": None,
                        "python_frames_dynamo": 0, "python_frames_guardjit": 0})
            return out
        r = timing.interleaved(a, b, rounds=rounds or s.rounds, target_ms=s.target_ms)
        out.update({"dynamo_check_us": r.a_us, "guardjit_check_us": r.b_us, "ratio": r.ratio,
                    "ratio_min": r.ratio_min, "ratio_max": r.ratio_max,
                    "check_batch": r.batch, "check_rounds": r.rounds})
        out.update(python_frames(captured))
        if cold and units and all(u.status != "dynamo" for u in units):
            # Where guardjit's time goes: the installed root (Dynamo's root
            # preamble + one lambda guard) against guardjit's check function
            # called directly, and its reference interpreter.
            fn = _checks([(_Direct(u.check), c.f_locals) for u, c in zip(units, captured)])
            r2 = timing.interleaved(b, fn, rounds=max(3, s.rounds // 2), target_ms=s.target_ms)
            out.update({"guardjit_fn_us": r2.b_us, "root_overhead_us": r2.a_us - r2.b_us})
            it = _checks([(_Direct(u.bound.interpret), c.f_locals)
                          for u, c in zip(units, captured)])
            r3 = timing.interleaved(it, fn, rounds=max(3, s.rounds // 2), target_ms=s.target_ms)
            out["interpreter_us"] = r3.a_us
        if cold:
            c = cold_interleaved(a, b, s.cold_rounds, s.cold_calls)
            out.update({"dynamo_check_cold_us": c["a_us"], "guardjit_check_cold_us": c["b_us"],
                        "cold_ratio": c["ratio"]})
        if full:
            out.update(measure_full_check(case, s, b, captured, [u.check for u in units]))
    return out


# --- step 2: cache lookup, end to end, stance -------------------------------------------

class SideBackend:
    """``backend`` of one side: the named backend, equal only to itself.

    torch.compile's backend wrappers compare equal when they wrap the same
    backend, and Dynamo's cache lookup shares a cache entry between equal
    backends; both models compile the same code object, so without this
    guardjit's compiled model would run torch's cache entry. With one
    instance per side each side has its own entry (the lookup skips the
    other side's entry with one failed ``==``, and only on the first call
    after the other side ran: a hit moves the entry to the front).
    """

    def __init__(self, name: str, side: str) -> None:
        from torch._dynamo.backends.registry import lookup_backend

        self.compiler_fn = lookup_backend(name)
        self.__name__ = f"{name}[{side}]"

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        return self.compiler_fn(gm, example_inputs)


def _extra_lookup_sides(case: BenchCase, s: Settings) -> dict[str, Callable[[], object]]:
    """Compiled calls of the extra lookup sides, each compiled (first call)
    here: "guardjit-full" (guardjit, subtree skipping off) and one torch side
    per LOOKUP_OPTIONS entry but UNSAFE (a side of its own already). A side
    that fails to compile is left out (its option entry says so)."""
    args, kwargs = case.inputs()
    sides: dict[str, Callable[[], object]] = {}

    def add(name: str, compiled: Any, config: dict, skip: bool | None = None) -> None:
        def call() -> object:
            return compiled(*args, **kwargs)
        try:
            with torch._dynamo.config.patch(**config), \
                    (subtree_skip(skip) if skip is not None else contextlib.nullcontext()):
                call()
                call()
        except Exception:  # noqa: BLE001 - a missing side is reported by the caller
            if "--bench-debug" in sys.argv:
                traceback.print_exc()
            return
        sides[name] = call

    with subtree_skip(False):
        full = guardjit.compile(case.model, backend=SideBackend(s.e2e_backend, "guardjit-full"))
    add("guardjit-full", full, {}, skip=False)
    plugin.wait_for_tier_up()
    for name in LOOKUP_OPTIONS:
        if name == UNSAFE:
            continue
        kwargs_, config = option_kwargs(name)
        compiled = torch.compile(case.model, backend=SideBackend(s.e2e_backend, f"torch-{name}"),
                                 **kwargs_)
        add(name, compiled, config)
    return sides


def _extra_lookup_results(extra: dict[str, Callable[[], object]], index: dict[str, int],
                          per: list[list[float]], events: list[list[int]],
                          call_gj: Callable[[], object], lookup_gj: list[float],
                          s: Settings) -> dict[str, dict[str, Any]]:
    """Per torch option side: ``lookup_us`` (torch, that option) beside
    guardjit's default ``guardjit_lookup_us`` from the same rounds, ratio
    torch / guardjit. Where the profiler saw no lookup event (torch's
    guardless fast path), the whole call of both is timed interleaved
    instead and ``lookup_us`` is None (GUARDLESS_NOTE)."""
    out: dict[str, dict[str, Any]] = {}
    for name in LOOKUP_OPTIONS:
        if name == UNSAFE:
            continue
        if name not in extra:
            out[name] = {"lookup_us": None, "lookup_status": "error: the side did not compile"}
            continue
        i = index[name]
        seen = min(events[i]) if events[i] else 0
        if seen >= s.profile_calls:
            lk = _ratio_stats(per[i], lookup_gj)
            e = {"lookup_us": lk["a_us"], "guardjit_lookup_us": lk["b_us"],
                 "lookup_ratio": lk["ratio"], "lookup_ratio_min": lk["ratio_min"],
                 "lookup_ratio_max": lk["ratio_max"], "lookup_events_per_call": 1}
        else:
            e = {"lookup_us": None, "lookup_events_per_call": seen / s.profile_calls,
                 "lookup_note": GUARDLESS_NOTE}
        out[name] = e
        if e["lookup_us"] is not None and name != FLOOR:
            continue
        # The floor's whole call is always timed (every model's
        # call_overhead_vs_floor). An odd number of rounds, so that the
        # inverse of the median per-round ratio is the median of the
        # inverted ratios (floor_fields).
        r = timing.interleaved(extra[name], call_gj, rounds=s.call_rounds | 1, warmup=2,
                               target_ms=max(s.target_ms, 5.0))
        e.update({"call_us": r.a_us, "call_us_guardjit": r.b_us, "call_ratio": r.ratio,
                  "call_ratio_min": r.ratio_min, "call_ratio_max": r.ratio_max})
    return out


def floor_fields(entry: dict[str, Any], layers: int | None) -> dict[str, Any]:
    """A model's figures in users' terms, from what the bench measured:

    * ``floor_call_us``: the whole call of torch with no guards at all
      (FLOOR), and ``call_us_guardjit_vs_floor`` guardjit's whole call in the
      same rounds; ``call_overhead_vs_floor``: guardjit / floor, the median
      of the per-round ratios with its spread (``_min``, ``_max``);
    * ``lookup_us_unsafe``: torch's lookup with both unsafe options (UNSAFE),
      from the same profiler rounds as ``lookup_us_guardjit``;
    * ``lookup_per_layer_us`` (guardjit), ``_torch`` and ``_unsafe``: the
      lookup divided by the model's repeated layers (None where nothing
      repeats).
    """
    options = entry.get("options") or {}
    floor = options.get(FLOOR) or {}
    unsafe = options.get(UNSAFE) or {}
    out: dict[str, Any] = {"floor_call_us": floor.get("call_us"),
                           "call_us_guardjit_vs_floor": floor.get("call_us_guardjit"),
                           "call_overhead_vs_floor": None, "call_overhead_vs_floor_min": None,
                           "call_overhead_vs_floor_max": None,
                           "lookup_us_unsafe": (unsafe.get("lookup_us")
                                                if unsafe.get("status") == "ok" else None),
                           "layers": layers}
    ratio, lo, hi = (floor.get(k) for k in ("call_ratio", "call_ratio_min", "call_ratio_max"))
    if ratio and lo and hi:
        # call_ratio is floor / guardjit per round, over an odd number of
        # rounds: its inverse is the median of guardjit / floor.
        out.update({"call_overhead_vs_floor": 1 / ratio, "call_overhead_vs_floor_min": 1 / hi,
                    "call_overhead_vs_floor_max": 1 / lo})
    for key, lookup in (("lookup_per_layer_us", entry.get("lookup_us_guardjit")),
                        ("lookup_per_layer_us_torch", entry.get("lookup_us_torch")),
                        ("lookup_per_layer_us_unsafe", out["lookup_us_unsafe"])):
        out[key] = lookup / layers if layers and lookup is not None else None
    return out


def measure_end_to_end(case: BenchCase, s: Settings) -> dict[str, Any]:
    torch._dynamo.reset()
    out: dict[str, Any] = {"e2e_backend": s.e2e_backend}
    plain = torch.compile(case.model, backend=SideBackend(s.e2e_backend, "torch"))
    gj = guardjit.compile(case.model, backend=SideBackend(s.e2e_backend, "guardjit"))
    args, kwargs = case.inputs()

    def call_plain() -> object:
        return plain(*args, **kwargs)

    def call_gj() -> object:
        return gj(*args, **kwargs)

    seen_before = guardjit.stats().get("units_seen", 0)
    start = time.perf_counter()
    call_plain()
    out["e2e_compile_s_torch"] = time.perf_counter() - start
    start = time.perf_counter()
    with capture_units() as cap_gj:
        call_gj()
    out["e2e_compile_s_guardjit"] = time.perf_counter() - start
    out.update(_wait_for_tier_up())
    # torch.compile with both unsafe options (UNSAFE), a third side.
    unsafe_kwargs, unsafe_config = option_kwargs(UNSAFE)
    unsafe = torch.compile(case.model, backend=SideBackend(s.e2e_backend, "torch-unsafe"),
                           **unsafe_kwargs)

    def call_unsafe() -> object:
        return unsafe(*args, **kwargs)

    un: dict[str, Any] = {"kind": "torch unsafe options vs guardjit sound", "status": "error"}
    try:
        with torch._dynamo.config.patch(**unsafe_config), capture_units() as cap_unsafe:
            call_unsafe()
    except Exception as e:  # noqa: BLE001 - recorded, never raised
        un["error"] = _err(e)
        cap_unsafe = []
    # guardjit with subtree skipping off (its full check), torch with its own
    # dict-tag option, and torch with no guards at all (the floor): more
    # sides of the same interleave (issue 14).
    extra = _extra_lookup_sides(case, s)
    for _ in range(3):
        call_plain()
        call_gj()
        if cap_unsafe:
            call_unsafe()
        for fn in extra.values():
            fn()
    out["units_guardjit_e2e"] = guardjit.stats().get("units_seen", 0) - seen_before

    # The stance is set per call, so its two sides join the same interleave
    # (one set of profiler rounds for all four instead of three pairs).
    stance = lambda: torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)  # noqa: E731

    def plain_stance() -> object:
        with stance():
            return plain(*args, **kwargs)

    def gj_stance() -> object:
        with stance():
            return gj(*args, **kwargs)

    st: dict[str, Any] = {"kind": "stance"}
    sides: list[Callable[[], object]] = [call_plain, call_gj]
    try:
        plain_stance()
        gj_stance()
        sides += [plain_stance, gj_stance]
    except Exception as e:  # noqa: BLE001 - recorded, never raised
        st.update({"status": "error", "error": _err(e)})
    unsafe_side = len(sides) if cap_unsafe else None
    if cap_unsafe:
        sides.append(call_unsafe)
    extra_side = {name: len(sides) + i for i, name in enumerate(extra)}
    sides += list(extra.values())
    events: list[list[int]] = []
    per = interleaved_lookups(sides, s.profile_rounds, s.profile_calls, events)
    out["option_lookups"] = _extra_lookup_results(extra, extra_side, per, events, call_gj,
                                                  per[1], s)
    if "guardjit-full" in extra_side:
        lk = _ratio_stats(per[extra_side["guardjit-full"]], per[1])
        out.update({"lookup_us_guardjit_full": lk["a_us"],
                    "lookup_skip_speedup": lk["ratio"]})
    if unsafe_side is not None:
        try:
            un.update(measure_unsafe(case, s, cap_unsafe, cap_gj, per[unsafe_side], per[1]))
        except Exception as e:  # noqa: BLE001 - recorded, never raised
            un.update({"status": "error", "error": _err(e)})
    out["unsafe"] = un
    lk = _ratio_stats(per[0], per[1])
    out.update({"lookup_us_torch": lk["a_us"], "lookup_us_guardjit": lk["b_us"],
                "lookup_ratio": lk["ratio"], "lookup_ratio_min": lk["ratio_min"],
                "lookup_ratio_max": lk["ratio_max"]})
    r = timing.interleaved(call_plain, call_gj, rounds=s.call_rounds, warmup=2,
                           target_ms=max(s.target_ms, 5.0))
    out.update({"call_us_torch": r.a_us, "call_us_guardjit": r.b_us, "call_ratio": r.ratio,
                "call_ratio_min": r.ratio_min, "call_ratio_max": r.ratio_max})

    # The skip_guard_eval_unsafe stance on the same two compiled models: only
    # the differentiating guards run (its cost is the bar for guardjit's own
    # differentiating sets). Compared with plain torch.compile without it.
    if len(sides) < 4:
        out["stance"] = st
        return out
    try:
        lk_t = _ratio_stats(per[0], per[2])
        lk_g = _ratio_stats(per[1], per[3])
        st.update({"lookup_us_torch": lk_t["b_us"], "lookup_us_guardjit": lk_g["b_us"],
                   "lookup_us_torch_without": lk_t["a_us"],
                   "lookup_us_guardjit_without": lk_g["a_us"],
                   "lookup_ratio_vs_torch": lk_t["ratio"],
                   "lookup_ratio_vs_guardjit": lk_g["ratio"]})
        rc = timing.interleaved(call_plain, plain_stance, rounds=s.call_rounds, warmup=2,
                                target_ms=max(s.target_ms, 5.0))
        st.update({"call_us_torch": rc.b_us, "call_us_torch_without": rc.a_us,
                   "call_ratio_vs_torch": rc.ratio, "status": "ok"})
    except Exception as e:  # noqa: BLE001 - recorded, never raised
        st.update({"status": "error", "error": _err(e)})
    out["stance"] = st
    return out


def measure_unsafe(case: BenchCase, s: Settings, cap_unsafe: list[Captured],
                   cap_gj: list[Captured], lookup_unsafe: list[float],
                   lookup_gj: list[float]) -> dict[str, Any]:
    """The UNSAFE entry: torch's check and lookup with both unsafe options
    (``check_us``, ``lookup_us``) against guardjit's sound ones
    (``guardjit_check_us``, ``guardjit_lookup_us``), each pair from the same
    interleaved rounds; ratios are torch / guardjit."""
    from guardjit import recorder

    fix_frame_locals(case, cap_unsafe)
    fix_frame_locals(case, cap_gj)
    a = _checks([(c.dynamo_root, c.f_locals) for c in cap_unsafe])
    b = _checks([(c.final_root, c.f_locals) for c in cap_gj])
    r = timing.interleaved(a, b, rounds=s.option_rounds, target_ms=s.target_ms)
    lk = _ratio_stats(lookup_unsafe, lookup_gj)
    return {"status": "ok",
            "guards": sum(sum(recorder.count_tree_guards(c.dynamo_root).values())
                          for c in cap_unsafe),
            "guardjit_guards": sum(sum(recorder.count_tree_guards(c.dynamo_root).values())
                                   for c in cap_gj),
            "check_us": r.a_us, "guardjit_check_us": r.b_us, "check_ratio": r.ratio,
            "check_ratio_min": r.ratio_min, "check_ratio_max": r.ratio_max,
            "lookup_us": lk["a_us"], "guardjit_lookup_us": lk["b_us"],
            "lookup_ratio": lk["ratio"], "lookup_ratio_min": lk["ratio_min"],
            "lookup_ratio_max": lk["ratio_max"],
            "python_frames_torch": python_frames(cap_unsafe)["python_frames_dynamo"]}


# --- step 3: the guide's options ----------------------------------------------------------

def measure_option(case: BenchCase, name: str, s: Settings) -> dict[str, Any]:
    compile_kwargs, config = option_kwargs(name)
    kind = "guard_filter_fn" if name in FILTERS else "torch._dynamo.config"
    try:
        r = measure_checks(case, s, compile_kwargs, config, cold=False, rounds=s.option_rounds)
        r["kind"] = kind
        r.setdefault("status", "ok")
        return r
    except Exception as e:  # noqa: BLE001 - recorded, never raised
        if "--bench-debug" in sys.argv:
            traceback.print_exc()
        return {"kind": kind, "status": "error", "error": _err(e), "guards": None,
                "dynamo_check_us": None, "guardjit_check_us": None, "ratio": None}


# --- one model ------------------------------------------------------------------------------

STEPS_PER_MODEL = 2 + len(OPTIONS) - 2 + 1  # build+check, end to end (+stance, unsafe), options, passes


def unit_frames(case: BenchCase, units: list) -> list[dict]:
    """Per unit, frame locals its check passes on: the compile-time dict,
    or the frames of an eager call when that dict went stale (entry_locals)."""
    frames = []
    for u in units:
        fl = u.f_locals
        if fl is None or not u.check(fl):
            fl = entry_locals(case, u.code) if u.code is not None else None
            if fl is None or not u.check(fl):
                raise RuntimeError("a check fails on its compile-time frame locals and on "
                                   "the frame locals of an eager call")
        frames.append(fl)
    return frames


def measure_model(name: str, factory: Callable[[bool], BenchCase], s: Settings,
                  tick: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name}
    errors: dict[str, str] = {}
    start = time.perf_counter()
    with torch.no_grad():
        tick(f"{name}: build + guard check")
        try:
            case = factory(s.quick)
        except Exception as e:  # noqa: BLE001
            for k in MODEL_FIELDS[1:]:
                entry[k] = None
            entry.update({"options": {}, "status": "error", "error": f"build: {_err(e)}"})
            for _ in range(STEPS_PER_MODEL - 1):
                tick(f"{name}: skipped")
            return entry
        entry["name"] = case.name
        entry["description"] = case.description
        entry["parameters"] = sum(p.numel() for p in case.model.parameters())
        entry["tensors"] = (sum(1 for _ in case.model.parameters())
                            + sum(1 for _ in case.model.buffers()))
        try:
            entry.update(measure_checks(case, s, full=True))
        except Exception as e:  # noqa: BLE001
            errors["check"] = _err(e)
        tick(f"{name}: cache lookup + end to end ({s.e2e_backend})")
        stance: dict[str, Any] = {"kind": "stance", "status": "error"}
        unsafe: dict[str, Any] = {"kind": "torch unsafe options vs guardjit sound",
                                  "status": "error"}
        option_lookups: dict[str, dict[str, Any]] = {}
        try:
            e2e = measure_end_to_end(case, s)
            stance = e2e.pop("stance")
            unsafe = e2e.pop("unsafe")
            option_lookups = e2e.pop("option_lookups", {})
            entry.update(e2e)
        except Exception as e:  # noqa: BLE001
            errors["end_to_end"] = _err(e)
            stance["error"] = unsafe["error"] = errors["end_to_end"]
        options: dict[str, Any] = {}
        for opt in OPTIONS:
            if opt == STANCE:
                options[opt] = stance
                continue
            if opt == UNSAFE:
                options[opt] = unsafe
                continue
            if s.core and opt not in LOOKUP_OPTIONS:
                continue
            tick(f"{name}: {opt}")
            options[opt] = measure_option(case, opt, s)
        for opt, lk in option_lookups.items():
            # torch's own check under the option (Dynamo's tree as torch
            # built it there) beside its lookup.
            options[opt]["check_us"] = options[opt].get("dynamo_check_us")
            options[opt].update(lk)
        entry["options"] = options
        entry.update(floor_fields(entry, case.layers))
        tick(f"{name}: passes")
        try:
            if s.core:
                entry["passes"] = {"status": "skipped", "reason": "not measured (--core)"}
            else:
                entry["passes"] = measure_passes(
                    case, s, unit_frames,
                    lambda: measure_checks(case, s, *option_kwargs(UNSAFE), cold=False,
                                           rounds=s.option_rounds))
        except Exception as e:  # noqa: BLE001 - recorded, never raised
            entry["passes"] = {"status": "error", "error": _err(e)}
    for k in MODEL_FIELDS:
        entry.setdefault(k, None)
    if errors:
        entry["errors"] = errors
    entry["wall_s"] = time.perf_counter() - start
    torch._dynamo.reset()
    return entry


# --- progress -------------------------------------------------------------------------------

class Progress:
    """tqdm when installed, else a counter on stderr."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.n, self.enabled = total, 0, enabled
        self.bar = None
        self.start = time.perf_counter()
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, file=sys.stderr, unit="step", dynamic_ncols=True)
            except ImportError:
                self.bar = None

    def __call__(self, what: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            if self.n:
                self.bar.update(1)
            self.bar.set_description_str(what[:60])
        else:
            el = time.perf_counter() - self.start
            print(f"[{self.n + 1}/{self.total} {el:5.0f}s] {what}", file=sys.stderr, flush=True)
        self.n += 1

    def close(self, done: bool = False) -> None:
        """Ends the bar; ``done``: the work finished, so it shows the total
        (an estimated total may have been more steps than ran)."""
        if self.bar is not None:
            self.bar.update(self.total - self.bar.n if done else 1)
            self.bar.close()


def run(names: list[str], s: Settings, progress: bool = True) -> dict[str, Any]:
    from guardjit.bench.corpus import CORPUS
    from guardjit.bench.report import run_record

    bar = Progress(len(names) * STEPS_PER_MODEL, progress)
    plugin.config.opt_level = s.opt_level
    start = time.perf_counter()
    results = []
    # One intra-op thread: on a shared 2-core machine a second OpenMP thread
    # waits on cores other jobs hold, which swamps a tiny model's call time.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name in names:
            results.append(measure_model(name, CORPUS[name], s, bar))
    finally:
        torch.set_num_threads(threads)
        bar.close()
    return {**run_record(s, start), "models": results}
