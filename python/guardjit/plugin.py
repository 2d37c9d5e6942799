"""The torch.compile plugin: Dynamo's cache lookup runs guardjit's check.

How a compile unit is converted (torch 2.13, no patch to torch):

1. The recorder mirrors Dynamo's guard-building calls into Guard IR.
2. The plugin wraps ``CheckFunctionManager.__init__``. When it returns, the
   tree is built and finalized, Dynamo's own check has passed on the
   compile-time frame locals, and the cache entry does not exist yet (it
   reads ``wrapper.root`` only when it is constructed, from the
   ``GuardedCode`` the caller builds next). Units Dynamo builds for export
   are never offered (:func:`stats` names them); units built without that
   check because they were loaded from a precompiled artifact
   (``skip_guards_check``) are converted at their first passing check
   instead (precompile.py). ``guard_manager_testing_hook_fn`` stays free for
   other code.
3. There the plugin binds the IR, compiles it with the LLVM JIT, verifies that
   the interpreter and the native code both pass on the same frame locals and
   that the IR has exactly the leaf guards of Dynamo's tree, then replaces
   ``wrapper.root`` with a fresh ``RootGuardManager`` whose only guard is the
   native check. Dynamo's tree is kept for ``check_verbose`` (recompile
   reasons) and printing. A unit with no guard at all keeps Dynamo's empty
   root (torch's has-no-guards fast paths then apply).
4. Then, for every code object with guardjit units, ``stance.update``
   recomputes the differentiating root of every cache entry of that code
   (``skip_guard_eval_unsafe``; stance.py).

Anything unexpected leaves the unit on Dynamo's own tree and is counted in
:func:`stats` with its reason: slower, never wrong.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import logging
import os
import threading
import time
import weakref
from typing import Any, Callable

import torch
import torch._dynamo.guards as dynamo_guards
from torch._C._dynamo.guards import RootGuardManager
from torch._guards import CompileContext

from guardjit import _core, _logging, precompile, pyattr, recorder, stance, tiering

_PYTHON_GUARDS = ("LAMBDA_GUARD", "LAMBDA_GUARD (epilogue)")

# GUARDJIT_LOGS (_logging.py) sets this logger and the C++ one alike:
# debug prints each conversion, info each unit left on Dynamo's path with its
# reason, warning (the default) anything unexpected.
log = logging.getLogger("guardjit")
_logging.configure()


@dataclasses.dataclass
class Unit:
    """One compile unit seen by the plugin."""

    name: str
    status: str  # "native", "interpreter" or "dynamo"
    guards: int
    python_guards: int = 0
    reason: str = ""
    compile_ms: float = 0.0
    ir: Any = None
    bound: Any = None
    native: Any = None
    check: Any = None  # the callable installed in the new root
    dynamo_root: Any = None
    native_root: Any = None
    f_locals: dict | None = None  # only when keep_frame_locals is on
    code: Any = None
    recorded_ir: Any = None  # the IR as recorded, before the pipeline
    # one dict per pass of config.pipeline (_core.run_pipeline): pass,
    # guards_before/after, values_before/after, guards_removed, us
    pipeline_stats: list = dataclasses.field(default_factory=list)
    # why subtree skipping declined this unit ("" when it has a plan or
    # skipping is off)
    skip_declined: str = ""


def _env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """The environment variable ``name`` (lower case) when it is one of
    ``choices``; else a warning in the guardjit log and ``default``."""
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in choices:
        return value.lower()
    log.warning("%s=%r is not one of %s: using %r", name, value, ", ".join(choices), default)
    return default


@dataclasses.dataclass
class Config:
    mode: str = dataclasses.field(  # GUARDJIT_MODE
        default_factory=lambda: _env_choice("GUARDJIT_MODE", "native", ("native", "interpreter")))
    # The first native code's level (O0 | light | O1 | O2): O0 compiles
    # fastest (docs/performance.md "Compile latency and the two tiers"), and the
    # tier-up replaces it. GUARDJIT_OPT sets it for the process.
    opt_level: str = os.environ.get("GUARDJIT_OPT", "O0")
    # The level a native check is recompiled at on guardjit's background
    # thread (docs/performance.md "Compile latency and the two tiers"); "off" keeps the
    # opt_level code. GUARDJIT_TIER_UP sets it for the process.
    tier_up: str = dataclasses.field(
        default_factory=lambda: os.environ.get("GUARDJIT_TIER_UP", "O1"))
    # Where a unit's first native code is compiled: "background" (the
    # default: the unit is checked by the interpreter at once and the code
    # at opt_level, then at tier_up, is swapped in from guardjit's
    # background thread; no call waits for LLVM) or "sync" (compiled at
    # opt_level on Dynamo's compile thread, inside the first call).
    # GUARDJIT_FIRST_TIER sets it for the process.
    first_tier: str = dataclasses.field(
        default_factory=lambda: _env_choice("GUARDJIT_FIRST_TIER", "background",
                                            ("background", "sync")))
    route_all: bool = False  # convert every compile unit (guardjit.install)
    keep_units: bool = False  # keep Unit records (demo, tests, bench)
    keep_frame_locals: bool = False  # keep compile-time frame locals (demo)
    # Pass pipeline run on every recorded set before binding and the JIT
    # (guard-ir-opt -passes= syntax; "default" = the sound structural passes;
    # "" runs none). GUARDJIT_PIPELINE sets it for the process.
    pipeline: str = dataclasses.field(
        default_factory=lambda: os.environ.get("GUARDJIT_PIPELINE", "default"))
    # What the differentiating sets run under skip_guard_eval_unsafe promise
    # (stance.POLICIES, docs/diffsets.md): "torch-compatible" keeps torch's
    # seed (an unwarmed tensor shape misses), "minimal" the smallest correct
    # set, "guarded-minimal" minimal plus cheap type/dtype/rank/device/constant
    # guards. GUARDJIT_DIFFSET_POLICY sets it for the process.
    diffset_policy: str = dataclasses.field(
        default_factory=lambda: os.environ.get("GUARDJIT_DIFFSET_POLICY", "torch-compatible"))
    # Sound subtree skipping (docs/subtree-skipping.md): while the dicts and
    # types a unit's nn.Module subtrees were read from keep their recorded
    # versions, only the residual guards run (tensor metadata, types, inputs,
    # global state). On by default; GUARDJIT_SUBTREE_SKIP=0 turns it off for
    # the process. torch's use_recursive_dict_tags_for_guards=True turns it
    # on whatever this says (subtree_skip_source()).
    subtree_skip: bool = dataclasses.field(
        default_factory=lambda: _env_choice(
            "GUARDJIT_SUBTREE_SKIP", "1", ("1", "on", "true", "yes", "0", "off", "false", "no"))
        not in ("0", "off", "false", "no"))
    # Plans whose estimated check is not clearly cheaper than the full one
    # are declined ("the plan does not pay"; SubtreeSkip.h). False plans
    # whenever a plan exists (GUARDJIT_SKIP_COST_MODEL=0; tests of the
    # mechanism on tiny models).
    subtree_skip_cost_model: bool = dataclasses.field(
        default_factory=lambda: _env_choice(
            "GUARDJIT_SKIP_COST_MODEL", "1", ("1", "on", "true", "yes", "0", "off", "false", "no"))
        not in ("0", "off", "false", "no"))


config = Config()
_lock = threading.Lock()
_active = threading.local()
_units: list[Unit] = []
_counters: collections.Counter = collections.Counter()
_reasons: collections.Counter = collections.Counter()
_pass_totals: collections.defaultdict = collections.defaultdict(collections.Counter)
_installed = False
_observers: list = []  # observe_units callbacks
# Units Dynamo built while guardjit was active but never offered to it.
_not_offered: list[dict] = []
# The wrappers of the converted units still alive (they die with their cache
# entries, e.g. at torch._dynamo.reset()).
_live_units: weakref.WeakSet = weakref.WeakSet()
# The checks with subtree skipping (for stats), and why units got none.
_skip_checks: weakref.WeakSet = weakref.WeakSet()
_skip_reasons: collections.Counter = collections.Counter()


class _DynamoTreeWrapper(dynamo_guards.GuardManagerWrapper):
    """A GuardManagerWrapper whose ``root`` is guardjit's, while Dynamo's
    original tree stays in ``dynamo_root`` and answers everything that
    explains guards (check_verbose, printing)."""

    dynamo_root: Any

    @contextlib.contextmanager
    def _dynamo_tree(self):
        native = self.root
        self.root = self.dynamo_root
        try:
            yield
        finally:
            self.root = native

    def check_verbose(self, x: Any) -> Any:
        return self.dynamo_root.check_verbose(x)

    def __str__(self) -> str:
        with self._dynamo_tree():
            return super().__str__()

    def collect_diff_guard_sources(self) -> Any:
        # Only feeds the sources torch seeds a new unit's tree with (its diff
        # root is replaced by guardjit's, or is the full one when opaque).
        with self._dynamo_tree():
            return super().collect_diff_guard_sources()

    def clone_with_chosen_sources(self, chosen_sources: Any) -> Any:
        return self.dynamo_root.clone_manager(lambda m: m.get_source() in chosen_sources)

    def populate_code_parts_for_debugging(self) -> None:
        with self._dynamo_tree():
            super().populate_code_parts_for_debugging()


class DeferredManagerWrapper(_DynamoTreeWrapper):
    """A unit built without Dynamo's check (a loaded precompiled artifact),
    waiting for the first check Dynamo's tree passes to be converted
    (precompile.py). Its root calls Dynamo's tree until then."""

    def check(self, x: Any) -> bool:
        return precompile.first_check(self, x)


class GuardJitManagerWrapper(_DynamoTreeWrapper):
    """A GuardManagerWrapper whose ``root`` runs guardjit's check.

    The differentiating root (``diff_guard_root``) is guardjit's (stance.py),
    never a clone of Dynamo's tree.
    """

    guardjit_ir: Any  # the checked GuardSet (after the pipeline)
    guardjit_borrowed: list | None  # weakrefs to the objects it borrows
    guardjit_name: str  # the compile id

    # torch sets ``cache_entry`` from C++ (~CacheEntry, CacheEntry::
    # invalidate), which may run in the middle of a compiled call (a code
    # object or an ID_MATCHed object dying there), where Dynamo's eval frame
    # offers every new frame to its callback; under skip_guard_eval_unsafe a
    # code object Dynamo has not seen raises "Recompilation triggered" there
    # before any skip rule applies (torch/csrc/dynamo/eval_frame_cpp.cpp), and
    # ~CacheEntry cannot propagate an error. This frame and _release's are
    # marked skipped when the module loads (_skip_in_dynamo, below): no
    # wrapper frame in between, no lookup.
    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name == "cache_entry":
            if value is not None:
                self.__dict__["_guardjit_had_entry"] = True
            elif self.__dict__.get("_guardjit_had_entry"):
                _release(self)

    def populate_diff_guard_manager(self) -> None:
        # torch calls this on every existing entry at the start of each
        # compile of the same code (update_diff_guard_managers_for_existing_
        # cache_entries). The unit's full check is correct whatever the new
        # entry will be; guardjit's hook then installs the reduced one. If the
        # hook does not run (guardjit uninstalled, a build that fails), the
        # full check stays.
        stance.install(self, self.root)

    def check_verbose(self, x: Any) -> Any:
        # Dynamo asks on every recompile: TORCH_LOGS=recompiles also names
        # the first guard failing in guardjit's check.
        _logging.check_failed(self.guardjit_name, self.guardjit_ir, x)
        return super().check_verbose(x)

    def check(self, x: Any) -> bool:
        # Only Python calls this (AOTCompiledFunction.guard_check, debugging);
        # Dynamo's lookup calls the root from C++. A miss also runs Dynamo's
        # tree, as plain torch's check did (precompile.on_miss).
        if self.root.check(x):
            return True
        return precompile.on_miss(self, x)


@contextlib.contextmanager
def active():
    """Converts the compile units compiled inside this context."""
    depth = getattr(_active, "depth", 0)
    _active.depth = depth + 1
    try:
        yield
    finally:
        _active.depth = depth


def _is_active() -> bool:
    return config.route_all or getattr(_active, "depth", 0) > 0


def _fallback(name: str, guards: int, reason: str, code: Any = None,
              unexpected: bool = False, concerns: str = "") -> str:
    # A gap guardjit documents (an unsupported accessor) is info; anything
    # else (an error, a disagreement with Dynamo) is a bug worth a warning,
    # naming the guard set (the compile id) and the guard it concerns.
    log.log(logging.WARNING if unexpected else logging.INFO,
            "compile unit %s (%d guards%s) stays on Dynamo's path: %s%s", name, guards,
            f", code {code.co_name} at {code.co_filename}:{code.co_firstlineno}"
            if code is not None else "", reason, f"; concerns {concerns}" if concerns else "")
    _counters["units_dynamo"] += 1
    _counters["guards_total"] += guards
    _reasons[reason] += 1
    _logging.unit_left(name, guards, reason)  # TORCH_LOGS=guards, TORCH_TRACE
    if config.keep_units:
        _units.append(Unit(name=name, status="dynamo", guards=guards, reason=reason, code=code))
    return reason


def _convert(wrapper: Any, f_locals: dict, code: Any,
             deferred: precompile.Deferred | None = None) -> str | None:
    """Converts the unit on ``f_locals`` (the frame locals Dynamo's tree
    just passed on); returns why it stays on Dynamo's path, None when
    converted. ``deferred`` holds the recording of a unit built without
    Dynamo's check, converted at its first check (precompile.py)."""
    root = wrapper.root
    # transformers may have been imported since the last unit.
    pyattr.ensure_registered()
    if deferred is None:
        compile_id = str(CompileContext.current_compile_id())
        rec = recorder.take(root)
        recorder.reset()  # drop abandoned recordings (e.g. the filter's first build)
    else:
        compile_id, rec = deferred.name, deferred.rec
    tree = recorder.count_tree_guards(root)
    total = sum(tree.values())
    _counters["units_seen"] += 1
    if rec is None and total == 0:
        # Nothing was built (e.g. guard_filter_fn=skip_all_guards_unsafe): the
        # empty set, which always passes, is exactly Dynamo's empty tree.
        rec = recorder.Recording(root=root, ir=_core.GuardSet("unit"))
    if rec is None:
        return _fallback(compile_id, total, "guard tree was not recorded", code, unexpected=True)
    if rec.unsupported:
        return _fallback(compile_id, total, rec.unsupported[0], code)
    if rec.recorded_kinds != tree:
        return _fallback(compile_id, total,
                         f"recorded guards {rec.recorded_kinds} differ from Dynamo's tree {tree}",
                         code, unexpected=True)
    recorded = rec.ir
    recorded.name = compile_id
    ir, pipeline_stats = recorded, []
    if config.pipeline:
        # A copy: the unit keeps the recorded set (tests, export, bench).
        ir = recorded.copy()
        try:
            pipeline_stats = _per_pass(_core.run_pipeline(ir, config.pipeline))
        except Exception as e:
            return _fallback(compile_id, total, f"pipeline: {e}", code, unexpected=True)
        _count_pipeline(pipeline_stats)
    try:
        bound = _core.bind(ir)
    except Exception as e:
        return _fallback(compile_id, total, f"bind: {e}", code, unexpected=True)
    if not bound.interpret(f_locals):
        return _fallback(compile_id, total,
                         "interpreter disagrees with Dynamo on the compile-time frame locals", code,
                         unexpected=True, concerns=_explain(bound, f_locals))
    native = None
    compile_ms = 0.0
    background = config.mode == "native" and config.first_tier != "sync"
    if config.mode == "native" and not background:
        start = time.perf_counter()
        try:
            native = _core.compile(bound, config.opt_level)
        except Exception as e:
            return _fallback(compile_id, total, f"JIT: {e}", code, unexpected=True)
        compile_ms = (time.perf_counter() - start) * 1e3
    check = _core.make_guard(bound, native)
    if native is not None and not check(f_locals):
        return _fallback(compile_id, total,
                         "native check disagrees with Dynamo on the compile-time frame locals", code,
                         unexpected=True,
                         concerns="one of its guards (the interpreter passes: a JIT bug)")

    # Guards guardjit calls as Python: its own lambda guards (a SHAPE_ENV
    # lambda whose parts all became shape_expr guards is not one).
    python_guards = sum(n for k, n in ir.count_by_kind().items() if k in _PYTHON_GUARDS)
    borrowed = stance.borrowed_refs(rec.borrowed)
    if borrowed is None:
        log.debug("compile unit %s borrows an object guardjit cannot track: it is opaque "
                  "to the differentiating sets of later compiles", compile_id)
    if _is_empty(recorded, root):
        # Nothing to check (e.g. guard_filter_fn=skip_all_guards_unsafe):
        # Dynamo's root has no guard, and torch's lookup serves such an entry
        # without evaluating anything (cache_entry_has_no_guards); a root with
        # guardjit's lambda would turn that off.
        new_root = root
        _counters["units_empty"] += 1
    else:
        new_root = RootGuardManager()
        new_root.add_lambda_guard(
            check, [f"guardjit: native check of {ir.num_guards} guards ({compile_id})"], None)
        new_root.attach_compile_id(compile_id)
        recorder.forget(new_root)  # guardjit's own root: not a recording
    if native is not None:
        tier_up(check)
    elif background and new_root is not root:
        # Interpreter first; the background thread compiles, and the first
        # call of each new code also runs the interpreter (include/guardjit/Check/CheckTarget.h).
        tiering.start(check, config.opt_level, config.tier_up)
    skip_declined = ""
    if new_root is not root:
        skip_declined = _enable_subtree_skip(check, f_locals, compile_id,
                                             config.mode == "native")
    wrapper.dynamo_root = root
    wrapper.guardjit_ir = ir
    wrapper.guardjit_borrowed = borrowed
    wrapper.guardjit_name = compile_id
    wrapper.guardjit_check = check
    wrapper.__class__ = GuardJitManagerWrapper
    wrapper.root = new_root
    _live_units.add(wrapper)
    # The full check until stance.update installs the reduced one (torch's
    # finalize cloned Dynamo's tree, whose fail counts guardjit never feeds).
    wrapper.diff_guard_root = new_root

    status = "native" if config.mode == "native" else "interpreter"
    log.debug("compile unit %s: %d guards checked by guardjit (%s, %.1f ms JIT, %d Python)",
              compile_id, total, status, compile_ms, python_guards)
    _counters[f"units_{status}"] += 1
    _counters["guards_total"] += total
    _counters["guards_native"] += total - python_guards
    _counters["guards_python"] += python_guards
    _counters["compile_ms_total"] += compile_ms
    _counters["shape_parts_native"] += rec.shape_parts_native
    _counters["shape_parts_python"] += rec.shape_parts_python
    _counters["aliasing_parts_native"] += rec.aliasing_parts_native
    _counters["aliasing_parts_python"] += rec.aliasing_parts_python
    for why in rec.shape_python_reasons:
        log.debug("compile unit %s: shape guard left in Python: %s", compile_id, why)
    for why in rec.aliasing_python_reasons:
        log.debug("compile unit %s: aliasing part left in Python: %s", compile_id, why)
    # TORCH_LOGS=guards, TORCH_TRACE (guardjit_unit artifact)
    _logging.unit_converted(compile_id, status, total, python_guards, ir, check, skip_declined,
                            compile_ms)
    if config.keep_units:
        _units.append(Unit(
            name=compile_id, status=status, guards=total, python_guards=python_guards,
            compile_ms=compile_ms, ir=ir, bound=bound, native=native, check=check,
            dynamo_root=root, native_root=new_root, code=code,
            f_locals=f_locals if config.keep_frame_locals else None,
            recorded_ir=recorded, pipeline_stats=pipeline_stats,
            skip_declined=skip_declined))
    return None


_LEVELS = ("O0", "light", "O1", "O2")


def _release(wrapper: GuardJitManagerWrapper) -> None:
    """Frees guardjit's part of a unit whose cache entry died.

    torch's CacheEntry sets ``cache_entry = None`` on its wrapper when it is
    destroyed (``torch._dynamo.reset()``, the code object collected) or
    invalidated (an ID_MATCH'd object collected): torch/csrc/dynamo/
    cache_entry.cpp, ``~CacheEntry`` and ``CacheEntry::invalidate``. The
    wrapper itself may live on much longer: the CheckFunctionManager that
    owns it is kept alive by the ``weakref.finalize`` of every object it
    ID_MATCHes (torch/_dynamo/guards.py ``id_ref``), so plain torch keeps its
    guard tree for as long as the model lives. guardjit then keeps no more
    than torch: the root goes back to Dynamo's tree, and the check (bound
    set, native code, subtree-skipping plan, residual and differentiating
    checks) and the IR are dropped. Called from torch's C++ with the GIL."""
    d = wrapper.__dict__
    dynamo_root = d.get("dynamo_root")
    if dynamo_root is None:
        return
    d["root"] = dynamo_root
    d["diff_guard_root"] = dynamo_root
    d["guardjit_ir"] = None
    d["guardjit_borrowed"] = None
    d["guardjit_check"] = None
    d.pop("_guardjit_diff", None)
    _counters["units_released"] = _counters.get("units_released", 0) + 1  # no __missing__ frame


def _skip_in_dynamo(*fns: Callable) -> None:
    """Dynamo's eval frame runs these functions' frames as they are, also
    when it meets them first under skip_guard_eval_unsafe (torch's own
    ``torch._dynamo.eval_frame.skip_code``, as torch does for its wrappers)."""
    for fn in fns:
        torch._dynamo.eval_frame.skip_code(fn.__code__)


_skip_in_dynamo(GuardJitManagerWrapper.__setattr__, _release)
precompile.connect(lock=_lock, convert=_convert, fallback=_fallback,
                   deferred_class=DeferredManagerWrapper)


def subtree_skip_source() -> str:
    """Why subtree skipping is on or off: "torch use_recursive_dict_tags_for_guards"
    (the user set torch's option, which guardjit serves soundly), "guardjit
    default", or "off" (config.subtree_skip / GUARDJIT_SUBTREE_SKIP=0)."""
    if getattr(torch._dynamo.config, "use_recursive_dict_tags_for_guards", False):
        return "torch use_recursive_dict_tags_for_guards"
    return "guardjit default" if config.subtree_skip else "off"


def _enable_subtree_skip(check: Any, f_locals: dict, compile_id: str, native: bool) -> str:
    """Plans subtree skipping for a freshly built check (on the frame locals
    it just passed on) and queues its residual check's native compile.
    Returns why the unit got no plan ("" when it got one or skipping is off)."""
    if subtree_skip_source() == "off":
        return ""
    why = _core.enable_subtree_skip(check, f_locals, config.subtree_skip_cost_model)
    if why:
        _counters["skip_units_declined"] += 1
        _skip_reasons[why.split(" (", 1)[0]] += 1
        log.debug("compile unit %s: no subtree skipping: %s", compile_id, why)
        return why
    _counters["skip_units"] += 1
    _skip_checks.add(check)
    if native:
        # The tier-up level when it is one (a bad one is tier_up's warning to
        # give), else the first code's.
        level = config.tier_up if config.tier_up in _LEVELS else config.opt_level
        _core.skip_compile(check, level)
    return ""


def tier_up(check: Any) -> bool:
    """Queues the background recompile of a native check at config.tier_up
    (tiering.schedule)."""
    return tiering.schedule(check, config.tier_up)


def wait_for_tier_up(timeout_s: float | None = None) -> bool:
    """Blocks until every queued background recompile is in place
    (tiering.wait); benchmarks call it before measuring the steady state."""
    return tiering.wait(timeout_s)


def _explain(bound: Any, f_locals: dict) -> str:
    try:
        return bound.explain(f_locals) or "no guard (it passes when run again)"
    except Exception as e:  # diagnostics only
        return f"an unknown guard ({e!r})"


def _per_pass(result: dict) -> list[dict]:
    """_core.run_pipeline's result as one dict per pass: pass,
    guards_before/after, values_before/after, guards_removed {KIND: n}, us."""
    guards, values = result["guards_in"], result["values_in"]
    out = []
    for p in result["passes"]:
        removed = sum(p["guards_removed"].values())
        out.append({"pass": p["name"], "guards_before": guards,
                    "guards_after": guards - removed, "values_before": values,
                    "values_after": values - p["values_removed"],
                    "guards_removed": dict(p["guards_removed"]), "us": p["us"]})
        guards -= removed
        values -= p["values_removed"]
    return out


def _count_pipeline(per_pass: list) -> None:
    if not per_pass:
        return
    _counters["pipeline_sets"] += 1
    _counters["pipeline_guards_in"] += per_pass[0]["guards_before"]
    _counters["pipeline_guards_out"] += per_pass[-1]["guards_after"]
    _counters["pipeline_values_in"] += per_pass[0]["values_before"]
    _counters["pipeline_values_out"] += per_pass[-1]["values_after"]
    for p in per_pass:
        _pass_totals[p["pass"]]["guards_removed"] += p["guards_before"] - p["guards_after"]
        _pass_totals[p["pass"]]["values_removed"] += p["values_before"] - p["values_after"]
        _pass_totals[p["pass"]]["us"] += p["us"]


def _is_empty(recorded: Any, root: Any) -> bool:
    """Whether the unit checks nothing: no recorded guard and a Dynamo root
    without leaf guards, accessors (a read can fail) or epilogue lambdas."""
    return (recorded.num_guards == 0 and not root.get_leaf_guards()
            and not root.get_accessors() and not root.get_epilogue_lambda_guards())


def _offer(wrapper: Any, output_graph: Any, code: Any, precompiled: bool = False) -> None:
    """Runs after ``CheckFunctionManager.__init__``: converts the unit when
    guardjit is active for it, then updates the code's differentiating roots.
    ``precompiled``: built by torch's precompile (aot_compile_fullgraph)."""
    f_locals = getattr(output_graph, "local_scope", None)
    not_offered = _not_offered_reason(output_graph)
    if (not_offered.startswith("skip_guards_check") and _installed and _is_active()
            and not isinstance(wrapper, GuardJitManagerWrapper)):
        # Loaded from a precompiled artifact: converted at its first check,
        # on the frame locals that check gets (precompile.py).
        compile_id = CompileContext.current_compile_id()
        name = (str(compile_id) if compile_id is not None
                else f"precompiled {getattr(code, 'co_name', '?')}")
        try:
            with _lock:
                precompile.defer(wrapper, code, name)
        except Exception as e:  # the unit keeps Dynamo's tree
            recorder.reset()
            _fallback(name, 0, f"internal error: {e!r}", unexpected=True)
        f_locals = None
    elif not_offered:
        # Dynamo built these guards without checking them on the frame
        # locals (the hook torch calls is skipped too): nothing to verify a
        # conversion against, so the unit keeps Dynamo's tree.
        recorder.reset()
        if _installed and _is_active():
            _note_not_offered(code, not_offered)
        f_locals = None
    else:
        dynamo_root = wrapper.root
        if not _installed or not _is_active() or isinstance(wrapper, GuardJitManagerWrapper):
            recorder.reset()
        else:
            try:
                with _lock:
                    _convert(wrapper, f_locals, code)
                if precompiled and isinstance(wrapper, GuardJitManagerWrapper):
                    precompile.mark(wrapper)
            except Exception as e:  # never break a model that works with torch.compile
                recorder.reset()
                _fallback(str(CompileContext.current_compile_id()), 0,
                          f"internal error: {e!r}", unexpected=True)
        # Every checked unit, converted or not (the bench's torch sides too).
        for observe in list(_observers):
            observe(dynamo_root, wrapper.root, f_locals, code)
    # Also when this unit stays on Dynamo's path or guardjit is not active
    # for it: the code's guardjit units must then keep their guards against it.
    _update_stance(code, wrapper, f_locals)


def _not_offered_reason(output_graph: Any) -> str:
    # CheckFunctionManager.__init__ runs Dynamo's check (and the testing
    # hook) only for `not skip_guards_check and not export`.
    if getattr(output_graph, "export", False):
        return "export: Dynamo builds the guards without checking them"
    if getattr(output_graph, "skip_guards_check", False):
        return "skip_guards_check: guards loaded or built without Dynamo's check"
    return ""


def _note_not_offered(code: Any, reason: str) -> None:
    compile_id = CompileContext.current_compile_id()
    name = str(compile_id) if compile_id is not None else "?"
    where = getattr(code, "co_name", "?")
    log.info("compile unit %s (%s) is never offered to guardjit: %s", name, where, reason)
    _counters["units_not_offered"] += 1
    _not_offered.append({"unit": name, "code": where, "reason": reason})


def _wrap_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        code = kwargs["f_code"] if "f_code" in kwargs else args[0]
        output_graph = kwargs["output_graph"] if "output_graph" in kwargs else args[1]
        # Only aot_compile_fullgraph builds with strict_error (torch 2.13).
        precompiled = bool(kwargs.get("strict_error", False))
        try:
            _offer(self.guard_manager, output_graph, code, precompiled)
        except Exception as e:  # never break a compile Dynamo got right
            recorder.reset()
            log.warning("guardjit: unit of %s left on Dynamo's path after an internal "
                        "error: %r", getattr(code, "co_name", code), e)

    __init__._guardjit_original = original  # type: ignore[attr-defined]
    return __init__


def _attached() -> bool:
    """Whether guardjit's wrapper is in CheckFunctionManager.__init__'s chain
    (others may wrap it in turn; functools.wraps keeps ``__wrapped__``)."""
    fn = dynamo_guards.CheckFunctionManager.__init__
    for _ in range(64):
        if getattr(fn, "_guardjit_original", None) is not None:
            return True
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return False
    return False


def _update_stance(code: Any, wrapper: Any, f_locals: Any, rebuild: bool = False) -> None:
    if code is None:
        return
    try:
        with _lock:
            stance.update(code, wrapper, policy=config.diffset_policy, mode=config.mode,
                          opt_level=config.opt_level, tier_up=config.tier_up,
                          first_tier=config.first_tier,
                          counters=_counters,
                          new_f_locals=f_locals if isinstance(f_locals, dict) else None,
                          rebuild=rebuild)
    except Exception as e:  # slower, never wrong: every entry keeps its full check
        log.warning("guardjit: differentiating sets of %s not computed (%r); every entry "
                    "checks its full guards under skip_guard_eval_unsafe",
                    getattr(code, "co_name", code), e)
        _counters["diffset_failures"] += 1
        _reasons[f"diffset: {e}"] += 1
        stance.reset_to_full(code, wrapper)


def refresh_stance(code: Any, rebuild: bool = False) -> None:
    """Recomputes the differentiating roots of ``code``'s cache entries (each
    compile does this; tests call it, ``rebuild`` JIT-compiles every reduced
    root anew)."""
    _update_stance(code, None, None, rebuild=rebuild)


def install_hooks() -> None:
    """Installs the recorder and the conversion wrapper (idempotent). The
    wrapper around ``CheckFunctionManager.__init__`` is installed again if
    other code replaced ``__init__`` without keeping it in its chain."""
    global _installed
    if not _attached():
        cfm = dynamo_guards.CheckFunctionManager
        cfm.__init__ = _wrap_init(cfm.__init__)
    if _installed:
        return
    recorder.install()
    pyattr.ensure_registered()
    _installed = True


def uninstall_hooks() -> None:
    """Stops recording and converting. The wrapper stays (it only updates the
    differentiating roots of codes that still have guardjit units, which must
    keep their guards against the units compiled from now on): it is removed
    only if no GuardJitManagerWrapper is alive and nothing wrapped it since."""
    global _installed
    if not _installed:
        return
    recorder.uninstall()
    _installed = False
    cfm = dynamo_guards.CheckFunctionManager
    original = getattr(cfm.__init__, "_guardjit_original", None)
    if original is not None and not _guardjit_units_alive():
        cfm.__init__ = original


@contextlib.contextmanager
def observe_units(callback: Any):
    """Calls ``callback(dynamo_root, final_root, f_locals, code)`` for every
    unit Dynamo checks inside the context, whether guardjit is active for it
    or not (the bench captures its torch sides too): Dynamo's root,
    the root its cache entry will run (guardjit's, or Dynamo's when the unit
    stays on Dynamo's path), the compile-time frame locals (a dict) and the
    code object. Called with the GIL held, during Dynamo's compile."""
    _observers.append(callback)
    try:
        yield
    finally:
        _observers.remove(callback)


def _guardjit_units_alive() -> bool:
    return len(_live_units) > 0


def units() -> list[Unit]:
    """Unit records kept while ``config.keep_units`` is on."""
    return list(_units)


def clear_units() -> None:
    _units.clear()


def stats() -> dict[str, Any]:
    """Counters over every compile unit seen since the process started.

    ``native_fraction`` is the fraction of leaf guards checked without calling
    Python (lambda guards are called as Python); ``sets_native_fraction`` the
    fraction of compile units whose check guardjit runs.
    """
    c = dict(_counters)
    seen = c.get("units_seen", 0)
    total = c.get("guards_total", 0)
    converted = c.get("units_native", 0) + c.get("units_interpreter", 0)
    return {
        # the torch release this process runs (and _core was built for)
        "torch": torch.__version__,
        # "verified" when native code reads TENSOR_MATCH's TensorImpl fields
        # inline, else why it calls the helper (TensorLayout in TorchHooks.h)
        "tensor_match_inline": _core.tensor_layout_status(),
        "units_seen": seen,
        "units_native": c.get("units_native", 0),
        "units_interpreter": c.get("units_interpreter", 0),
        "units_dynamo": c.get("units_dynamo", 0),
        "guards_total": total,
        "guards_native": c.get("guards_native", 0),
        "guards_python": c.get("guards_python", 0),
        "native_fraction": (c.get("guards_native", 0) / total) if total else 0.0,
        "sets_native_fraction": (converted / seen) if seen else 0.0,
        "compile_ms_total": c.get("compile_ms_total", 0.0),
        # units whose cache entry died and whose check guardjit freed
        # (_release); live_checks: check targets still alive in the process
        "units_released": c.get("units_released", 0),
        "live_checks": _core.live_checks(),
        # SHAPE_ENV code parts of converted units checked as native shape
        # expressions / left in a Python epilogue lambda.
        "shape_parts_native": c.get("shape_parts_native", 0),
        "shape_parts_python": c.get("shape_parts_python", 0),
        # Object-aliasing code parts (DUPLICATE_INPUT) of converted units
        # checked as object_aliasing guards / left in a Python lambda each.
        "aliasing_parts_native": c.get("aliasing_parts_native", 0),
        "aliasing_parts_python": c.get("aliasing_parts_python", 0),
        "fallback_reasons": dict(_reasons),
        # Units built while guardjit was active that Dynamo never offered to
        # it (export, skip_guards_check): {unit, code, reason} each.
        "units_not_offered": c.get("units_not_offered", 0),
        "not_offered": [dict(u) for u in _not_offered],
        "pipeline": config.pipeline,
        "pipeline_sets": c.get("pipeline_sets", 0),
        "pipeline_guards_in": c.get("pipeline_guards_in", 0),
        "pipeline_guards_out": c.get("pipeline_guards_out", 0),
        "pipeline_values_in": c.get("pipeline_values_in", 0),
        "pipeline_values_out": c.get("pipeline_values_out", 0),
        "passes": {name: dict(t) for name, t in _pass_totals.items()},
        # Units with no guard at all (they keep Dynamo's empty root).
        "units_empty": c.get("units_empty", 0),
        # skip_guard_eval_unsafe (stance.py): updates of a code object's diff
        # roots (one per compile of a code with guardjit units); per update
        # and guardjit unit, guards in/out of its differentiating set; entries
        # left opaque (their full root); reduced roots JIT-compiled / reused;
        # sets kept whole after an error; time spent (us).
        "diffset_policy": config.diffset_policy,
        "diffset_updates": c.get("diffset_updates", 0),
        "diffset_units": c.get("diffset_units", 0),
        "diffset_guards_in": c.get("diffset_guards_in", 0),
        "diffset_guards_out": c.get("diffset_guards_out", 0),
        "diffset_opaque": c.get("diffset_opaque", 0),
        # units whose set is the greedy answer (the exact search hit its budget)
        "diffset_inexact": c.get("diffset_inexact", 0),
        "diffset_roots_built": c.get("diffset_roots_built", 0),
        "diffset_roots_reused": c.get("diffset_roots_reused", 0),
        "diffset_errors": c.get("diffset_errors", 0) + c.get("diffset_failures", 0),
        "diffset_us": c.get("diffset_us", 0.0),
        # Python attribute hooks read natively (pyattr.py): per function its
        # registration status, and reads decided natively / handed back.
        "python_accessors": {"functions": pyattr.status(), **pyattr.stats()},
        # The background tier (config.tier_up): recompiles queued, installed,
        # failed (the unit keeps its code), dropped (the unit died first),
        # pending now, and their total compile time (ms).
        "tier_up": {"level": config.tier_up,
                    **{k: v for k, v in _core.tier_up_stats().items() if k != "last_error"}},
        "subtree_skip": _subtree_skip_stats(c),
        # Precompiled artifacts (precompile.py): units loaded without
        # Dynamo's check, converted at their first check.
        "precompile": precompile.stats(),
    }


def _subtree_skip_stats(c: collections.Counter) -> dict[str, Any]:
    """guardjit.stats()["subtree_skip"]: whether it is on and why
    (subtree_skip_source), units given a plan / declined (with reasons), and
    over the live checks: subtrees skipped, guards the validation implies and
    the residual keeps, calls answered by validation + residual (hits), calls
    whose recorded state had changed (fallbacks: the full check ran),
    snapshots taken, and units that stopped skipping (their state changed on
    every call)."""
    live = [s for s in (_core.skip_stats(ch) for ch in list(_skip_checks)) if s is not None]
    return {
        "enabled": subtree_skip_source() != "off",
        "source": subtree_skip_source(),
        "units": c.get("skip_units", 0),
        "units_declined": c.get("skip_units_declined", 0),
        "declined_reasons": dict(_skip_reasons),
        "live_units": len(live),
        "subtrees": sum(s["subtrees"] for s in live),
        "implied_guards": sum(s["implied_guards"] for s in live),
        "residual_guards": sum(s["residual_guards"] for s in live),
        "prelude_guards": sum(s.get("prelude_guards", 0) for s in live),
        "hits": sum(s["hits"] for s in live),
        "fallbacks": sum(s["fallbacks"] for s in live),
        "records": sum(s["records"] for s in live),
        "record_failures": sum(s["record_failures"] for s in live),
        "units_disabled": sum(1 for s in live if s["disabled"]),
        "residual_native": sum(1 for s in live if s["residual_native"]),
    }

