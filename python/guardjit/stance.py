"""guardjit owns ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``.

Under that stance torch 2.13's cache lookup (extra_state.cpp ``lookup``) runs
each cache entry's *differentiating* root, ``CacheEntry::diff_guard_root_mgr``
(a raw pointer read from ``wrapper.diff_guard_root`` by the CacheEntry
constructor and by ``cache_entry.update_diff_guard_root_manager()``), instead
of its full root; an entry whose diff root has no guards at all passes
(``cache_entry_has_no_guards``), a null diff root fails, and a miss raises
"Recompilation triggered with skip_guard_eval_unsafe stance".

Torch builds those roots by cloning its tree along the sources of
non-Parameter TENSOR_MATCH guards plus every node whose ``fail_count() > 0``
(``GuardManagerWrapper.collect_diff_guard_sources`` /
``update_diff_guard_managers_for_existing_cache_entries``, torch/_dynamo/
guards.py). Once guardjit's native check replaces the root, Dynamo's tree no
longer runs and never counts a failure, so that clone would let the first
entry serve every input. guardjit therefore computes the diff roots itself:

1. After every compile of a code object that has guardjit units (the
   conversion hook, after the new tree is final and before its CacheEntry
   exists), :func:`update` takes every live cache entry of the code (all
   ``isolate_recompiles`` buckets: ``_debug_get_cache_entry_list``) plus the
   new unit at the front, in cache order.
2. Each guardjit unit contributes its checked IR (the post-pipeline
   ``GuardSet``); every other entry is *opaque* (``None``): its diff root is its
   full root, and every guardjit unit keeps all of its guards against it.
   Invalidated entries (``DeletedGuardManagerWrapper``) are skipped.
3. :func:`diffsets` (``_core.diffsets``, docs/diffsets.md) reduces the sets
   under ``plugin.config.diffset_policy``; each reduced set is bound,
   JIT-compiled and installed as a ``RootGuardManager`` with one lambda guard
   (an empty one, with no guard and no guard-less read, has no guard at all,
   so torch's has-no-guards path applies; a lone read such as HASATTR's is
   a check).
   A reduced set equal to the unit's full set reuses the unit's root.
4. All new roots are built first (the JIT releases the GIL), then installed
   together, holding the GIL, with ``update_diff_guard_root_manager()`` for
   the entries that exist.

Lifetimes: the root's check releases the GIL while it takes its mutex, so
another thread may hold the raw pointer of a diff root while it is replaced.
Every replaced diff root therefore stays referenced from its wrapper
(``DiffRoots.retired``) until the wrapper itself dies with its cache entry;
there is at most one per compile of the code while the entry lives (torch's
recompile limit), and an unchanged reduced set reuses its root.

Outside the stance none of this runs: torch's lookup reads only the full
roots.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import weakref
from typing import Any

import torch._dynamo.guards as dynamo_guards
from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
from torch._C._dynamo.guards import RootGuardManager

from guardjit import _core, recorder, tiering

log = logging.getLogger("guardjit")

POLICIES = ("torch-compatible", "minimal", "guarded-minimal")

_Py_TPFLAGS_HEAPTYPE = 1 << 9


def diffsets(sets: list, policy: str = "torch-compatible") -> dict:
    """The differentiating sets of one code object's units (cache order, front
    first; None = opaque): ``{"sets": [GuardSet | None], "units": [stats]}``
    (``_core.diffsets``, the ``diffset<POLICY>`` pass: docs/diffsets.md). Each
    reduced set is a subset of its unit's set; an unknown policy raises
    ValueError."""
    return _core.diffsets(sets, policy)


@dataclasses.dataclass
class DiffRoots:
    """guardjit's stance state of one cache entry's wrapper (``_guardjit_diff``)."""

    # "reduced" (a JIT-compiled reduced set), "full" (the unit's own root),
    # "empty" (a root with no guards) or "opaque" (not a guardjit unit: its
    # full root)
    kind: str = "full"
    guards_in: int = 0
    guards_out: int = 0
    # The callable of the reduced root (counters: _core.guard_counters).
    check: Any = None
    # The last reduced set built for this unit: its identity (.gir text and
    # object addresses; "" for an empty set) and root, reused while the pass
    # returns the same set.
    text: Any = None
    reduced_root: Any = None
    reduced_check: Any = None
    # Every diff root replaced while the entry lived (a lookup in another
    # thread may still be running it).
    retired: list = dataclasses.field(default_factory=list)
    # The pass's stats of this unit in the last update (_core.diffsets' units).
    pass_stats: dict = dataclasses.field(default_factory=dict)


def state(wrapper: Any) -> DiffRoots:
    st = wrapper.__dict__.get("_guardjit_diff")
    if st is None:
        st = DiffRoots()
        wrapper._guardjit_diff = st
    return st


class OpaqueManagerWrapper(dynamo_guards.GuardManagerWrapper):
    """A torch wrapper beside guardjit units: its diff root is its full root.

    torch re-clones every entry's diff root at the start of each compile of the
    same code (``update_diff_guard_managers_for_existing_cache_entries``); this
    keeps the full root instead, which is always correct.
    """

    def populate_diff_guard_manager(self) -> None:
        install(self, self.root)


def install(wrapper: Any, root: Any) -> None:
    """Makes ``root`` the entry's diff root and points the C++ entry at it.

    The replaced root stays referenced from the wrapper. Holds the GIL
    throughout (no call here releases it), so a lookup sees either root.
    """
    st = state(wrapper)
    old = wrapper.diff_guard_root
    if old is root:
        return
    entry = wrapper.cache_entry
    if old is not None and entry is not None and old is not wrapper.root \
            and all(old is not r for r in st.retired):
        st.retired.append(old)
    wrapper.diff_guard_root = root
    if entry is not None:
        entry.update_diff_guard_root_manager()


def borrowed_refs(objs: list) -> list | None:
    """Weak references to the objects a unit's IR borrows, or None when one
    can be neither weakly referenced nor is immortal (a static type): then the
    IR cannot be re-read safely after its compile."""
    refs = []
    for o in objs:
        try:
            refs.append(weakref.ref(o))
        except TypeError:
            if isinstance(o, type) and not (o.__flags__ & _Py_TPFLAGS_HEAPTYPE):
                continue  # static types live as long as the interpreter
            if o is None or o is True or o is False:
                continue
            return None
    return refs


def _is_guardjit(wrapper: Any) -> bool:
    return getattr(wrapper, "guardjit_ir", None) is not None


def _live_wrappers(code: Any, new_wrapper: Any) -> list:
    # All buckets of the code (isolated regions fall back to the default one):
    # a unit's reduced set rejects the inputs of every unit it can meet.
    wrappers = [] if new_wrapper is None else [new_wrapper]
    for e in _debug_get_cache_entry_list(code):
        w = e.guard_manager
        if w is new_wrapper or isinstance(w, dynamo_guards.DeletedGuardManagerWrapper) \
                or w.root is None:
            continue
        wrappers.append(w)
    return wrappers


def _opaque(wrapper: Any, counters: Any) -> None:
    if type(wrapper) is dynamo_guards.GuardManagerWrapper:
        wrapper.__class__ = OpaqueManagerWrapper
    st = state(wrapper)
    st.kind, st.check = "opaque", None
    counters["diffset_opaque"] += 1
    install(wrapper, wrapper.root)


def _readable_ir(wrapper: Any) -> Any:
    """The unit's IR if its borrowed objects are all alive, else None."""
    refs = getattr(wrapper, "guardjit_borrowed", None)
    if refs is None or any(r() is None for r in refs):
        return None
    return wrapper.guardjit_ir


def _build(ir: Any, name: str, mode: str, opt_level: str,
           tier_up: str = "off", first_tier: str = "background") -> tuple[Any, Any]:
    """(root, check) running ``ir`` natively (or interpreted). With
    ``first_tier`` "background" the check runs the interpreter until the
    background thread has compiled it at ``opt_level``, then at ``tier_up``
    (tiering.start); with "sync" it is compiled here and the tier-up is
    queued (tiering.schedule)."""
    bound = _core.bind(ir)
    sync = mode == "native" and first_tier == "sync"
    native = _core.compile(bound, opt_level) if sync else None
    check = _core.make_guard(bound, native)
    if native is not None:
        tiering.schedule(check, tier_up)
    elif mode == "native" and ir.num_guards:
        tiering.start(check, opt_level, tier_up)
    root = RootGuardManager()
    root.add_lambda_guard(
        check, [f"guardjit: differentiating check of {ir.num_guards} guards ({name})"], None)
    recorder.forget(root)  # guardjit's own root: not a recording
    return root, check


def update(code: Any, new_wrapper: Any, *, policy: str, mode: str, opt_level: str,
           counters: Any, tier_up: str = "off", first_tier: str = "background",
           new_f_locals: dict | None = None, rebuild: bool = False) -> bool:
    """Recomputes and installs the diff root of every live entry of ``code``
    (and of ``new_wrapper``, the unit being compiled, whose CacheEntry does
    not exist yet). Does nothing for a code without guardjit units. Returns
    whether it ran. ``rebuild`` JIT-compiles a new root for every set, even
    an unchanged or whole one (tests: replacement under concurrent lookups)."""
    wrappers = _live_wrappers(code, new_wrapper)
    if not any(_is_guardjit(w) for w in wrappers):
        return False
    start = time.perf_counter()
    sets = [_readable_ir(w) if _is_guardjit(w) else None for w in wrappers]
    result = diffsets(sets, policy)
    counters["diffset_updates"] += 1

    # 1. Build every new root (the JIT releases the GIL: the old roots stay
    #    installed meanwhile, and they are correct for the old entries).
    plan = []
    for w, full, reduced, stats in zip(wrappers, sets, result["sets"], result["units"]):
        if full is None or reduced is None:
            plan.append((w, None))
            continue
        st = state(w)
        st.pass_stats = dict(stats)
        n_in, n_out = full.num_guards, reduced.num_guards
        counters["diffset_units"] += 1
        counters["diffset_inexact"] += not stats["exact"]
        counters["diffset_guards_in"] += n_in
        counters["diffset_guards_out"] += n_out
        # R_i is a subset of G_i, so as many guards is G_i, except under
        # guarded-minimal, which may weaken a TENSOR_MATCH to its rank: then
        # G_i checks more, which is still correct (G_i(x) <=> G_i(x)).
        if n_out == n_in and not rebuild:
            plan.append((w, ("full", w.root, None, n_in, n_out)))
            continue
        # No guard and no read: nothing to check (a guard-less read, e.g.
        # Dynamo's HASATTR getattr manager, is a check: it fails when the
        # attribute is missing, so such a set is built like any other).
        if n_out == 0 and reduced.num_values <= 1:
            root = st.reduced_root if st.text == "" and not rebuild else RootGuardManager()
            st.text, st.reduced_root, st.reduced_check = "", root, None
            plan.append((w, ("empty", root, None, n_in, n_out)))
            continue
        # print() holds every field but the objects' addresses (round trip).
        text = (reduced.print(), tuple(reduced.object_addresses()))
        if text == st.text and not rebuild:
            counters["diffset_roots_reused"] += 1
            plan.append((w, ("reduced", st.reduced_root, st.reduced_check, n_in, n_out)))
            continue
        try:
            root, check = _build(reduced, str(getattr(w, "guardjit_name", "")), mode, opt_level,
                                 tier_up, first_tier)
            if w is new_wrapper and new_f_locals is not None and not check(new_f_locals):
                raise RuntimeError("the reduced check rejects the unit's compile-time locals")
        except Exception as e:
            counters["diffset_errors"] += 1
            # Unexpected (GUARDJIT_LOGS): slower under the stance, never wrong.
            log.warning("differentiating set of compile unit %s (code %s) kept whole: %s",
                        getattr(w, "guardjit_name", "?"), getattr(code, "co_name", code), e)
            plan.append((w, ("full", w.root, None, n_in, n_in)))
            continue
        counters["diffset_roots_built"] += 1
        st.text, st.reduced_root, st.reduced_check = text, root, check
        plan.append((w, ("reduced", root, check, n_in, n_out)))

    # 2. Install them all, holding the GIL.
    for w, p in plan:
        if p is None:
            _opaque(w, counters)
            continue
        kind, root, check, n_in, n_out = p
        st = state(w)
        st.kind, st.check, st.guards_in, st.guards_out = kind, check, n_in, n_out
        install(w, root)
    counters["diffset_us"] += (time.perf_counter() - start) * 1e6
    return True


def reset_to_full(code: Any, new_wrapper: Any) -> None:
    """Every live entry of ``code`` checks its full root under the stance
    (after an internal error: slower, never wrong)."""
    for w in _live_wrappers(code, new_wrapper):
        try:
            install(w, w.root)
            state(w).kind = "full" if _is_guardjit(w) else "opaque"
        except Exception:  # keep going: each entry on its own
            log.exception("guardjit: cannot reset the diff root of an entry")
