"""Step 1 of ``guardjit.advise``: the cache lookup, the guard check, the pre-graph bytecode and the whole call per side.

The sides are the bench's (:mod:`guardjit.bench.options`, :mod:`guardjit.bench.run`):
plain ``torch.compile``, torch with each option of its guide to guard
overhead (``use_recursive_dict_tags_for_guards``; ``install_free_tensors``
with ``skip_guard_on_all_nn_modules_unsafe``; the ``skip_guard_eval_unsafe``
stance after warm-up), ``guardjit.compile`` (default) and ``guardjit.compile``
with each of those options (``guardjit+<option>``). Each side compiles a
shallow copy of the model whose top frame runs a code object of its own
(:func:`own_code`) with a backend of its own (``SideBackend``), so no side
shares a cache entry list with another: guardjit's differentiating sets
under the stance treat every other entry of a code as opaque
(:mod:`guardjit.stance`), which would otherwise give plain torch's stance
side guardjit's full roots. Each side is called on the example and every
warm-up input, and then, in one process and interleaved (docs/performance.md,
"How it is measured"):

* ``lookup_us``: self CPU time of the "TorchDynamo Cache Lookup" profiler
  event per call (``bench.lookup``); None where torch served the call
  without that event (its guardless fast path, ``lookup_note``);
* ``pregraph_us``: the "Pregraph bytecode" profiler events per call, the
  transformed code's bytecode that rebuilds the graph's inputs before the
  graph runs (0.0 where the frame has none);
* ``check_us``: the unit's root check on its frame locals, as the cache
  entry runs it (guardjit's root for guardjit's sides, Dynamo's for the
  others); None under the stance (it checks no root of its own);
* ``call_us``: the whole call, and ``call_ratio_vs_torch`` its per-round
  ratio to plain torch (median).
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
import types
from collections.abc import Callable
from typing import Any

import torch

import guardjit
from guardjit import plugin
from guardjit.bench.capture import Captured, capture_units, fix_frame_locals
from guardjit.bench.corpus import BenchCase
from guardjit.bench.options import STANCE, UNSAFE, option_kwargs
from guardjit.bench.run import GUARDLESS_NOTE, SideBackend, interleaved_lookups
from guardjit.lab import timing

DICT_TAGS = "use_recursive_dict_tags_for_guards"
GUARDJIT = "guardjit"
# The options of torch's guide, each a side of its own, with torch and with guardjit.
GUIDE = (DICT_TAGS, UNSAFE, STANCE)
# Side names, in the report's order; the option sides use torch's names.
SIDES = ("torch",) + GUIDE + (GUARDJIT,) + tuple(f"{GUARDJIT}+{o}" for o in GUIDE)


def parts(name: str) -> tuple[bool, str | None]:
    """(guardjit's side, the option of torch's guide or None) of a side name."""
    if name.startswith(GUARDJIT + "+"):
        return True, name[len(GUARDJIT) + 1:]
    return name == GUARDJIT, None if name in ("torch", GUARDJIT) else name


def own_code(model: Any) -> Any:
    """``model`` called through a code object of its own.

    An ``nn.Module`` gives a shallow copy (same parameters, buffers and
    submodules) whose ``forward`` is the class's function rebuilt on a
    ``code.replace()`` copy, with the same globals, defaults and closure
    (so ``super()`` works); a function gives such a rebuilt function, a bound
    method its rebuilt function bound to the same object. Dynamo
    keeps its cache entries on the code object, so the copy's entries are its
    own. Anything else (a module with its own ``forward`` attribute, a
    callable object) is returned unchanged: its sides share the entries.
    Frames below the top one (graph breaks in submodules) stay shared.
    """
    def rebuilt(fn: types.FunctionType) -> types.FunctionType:
        new = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                                 fn.__defaults__, fn.__closure__)
        new.__kwdefaults__ = fn.__kwdefaults__
        new.__dict__.update(fn.__dict__)
        new.__qualname__, new.__module__ = fn.__qualname__, fn.__module__
        return new

    if isinstance(model, types.FunctionType):
        return rebuilt(model)
    if isinstance(model, types.MethodType) and isinstance(model.__func__, types.FunctionType):
        # A bound method (a script's torch.compile(model.forward)): the same
        # object, its function on a code object of its own.
        return types.MethodType(rebuilt(model.__func__), model.__self__)
    fwd = getattr(type(model), "forward", None)
    if not isinstance(model, torch.nn.Module) or not isinstance(fwd, types.FunctionType) \
            or "forward" in vars(model):
        return model
    twin = copy.copy(model)
    object.__setattr__(twin, "forward", types.MethodType(rebuilt(fwd), twin))
    return twin


def _stance() -> Any:
    return torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)


class Side:
    """One compiled model and how to call it on the example inputs."""

    def __init__(self, name: str, case: BenchCase, backend: str,
                 inputs: tuple[tuple, dict] | None = None) -> None:
        self.name = name
        self.guardjit, self.option = parts(name)
        self.stance = self.option == STANCE
        self.captured: list[Captured] = []
        self.config: dict = {}
        kwargs: dict = {}
        if self.option in (DICT_TAGS, UNSAFE):
            kwargs, self.config = option_kwargs(self.option)
        # The model this side compiles: its own top code object (own_code).
        self.case = dataclasses.replace(case, model=own_code(case.model))
        compile_fn = guardjit.compile if self.guardjit else torch.compile
        # The stance sides run the compiled model under set_stance.
        self.model = compile_fn(self.case.model, backend=SideBackend(backend, name), **kwargs)
        # The same input tensors on every side (measure_sides): a CPU kernel's
        # speed can depend on its operands' addresses (alignment), which made
        # whole sides 3x slower than the others in a run.
        self.args, self.kwargs = inputs if inputs is not None else case.inputs()

    def warm(self, inputs: list[tuple]) -> None:
        """Compiles on the example and every warm-up input (the stance's
        model is warmed without the stance: the guide's order)."""
        with torch._dynamo.config.patch(**self.config), capture_units() as got:
            self.model(*self.args, **self.kwargs)
        self.captured = got
        self.warmup_errors: list[str] = []
        with torch._dynamo.config.patch(**self.config):
            for i, args in enumerate(inputs):
                try:
                    self.model(*args, **self.kwargs)
                except Exception as e:  # noqa: BLE001 - an unsafe option may serve a
                    # graph of another shape: step 3 shows it; the side is still measured
                    self.warmup_errors.append(f"warm-up input {i}: {type(e).__name__}: "
                                              f"{str(e).splitlines()[0][:160]}")

    def call(self) -> Callable[[], object]:
        model, args, kwargs = self.model, self.args, self.kwargs
        if self.stance:
            def run() -> object:
                with _stance():
                    return model(*args, **kwargs)
            return run
        return lambda: model(*args, **kwargs)

    def check(self) -> Callable[[], object] | None:
        if self.stance or not self.captured:
            return None
        roots = [((c.final_root if self.guardjit else c.dynamo_root).check, c.f_locals)
                 for c in self.captured]

        def run() -> None:
            for check, fl in roots:
                check(fl)
        return run


def interleaved_many(fns: list[Callable[[], object]], rounds: int,
                     target_ms: float) -> tuple[list[float], list[list[float]]]:
    """Per side the median µs per call and, per side, the per-round ratio to
    side 0; the sides alternate within each round, one batch each."""
    batch = max(1, min(timing.calibrate(f, target_ms) for f in fns))
    pc = time.perf_counter_ns
    per: list[list[float]] = [[] for _ in fns]
    for r in range(rounds + 2):
        for i, f in enumerate(fns):
            s = pc()
            for _ in range(batch):
                f()
            if r >= 2:  # warm-up rounds
                per[i].append((pc() - s) / batch / 1e3)
    ratios = [[x / y for x, y in zip(p, per[0])] for p in per]
    return [statistics.median(p) for p in per], ratios


def measure_sides(case: BenchCase, warmup: list[tuple], backend: str, rounds: int,
                  profile_calls: int, target_ms: float,
                  tick: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    # Frames below the top one are shared by the sides (own_code): their
    # entries, one per side and warm-up shape, must not hit the limit.
    with torch._dynamo.config.patch(recompile_limit=max(64, 8 * (len(warmup) + 2))):
        return _measure_sides(case, warmup, backend, rounds, profile_calls, target_ms, tick)


def _measure_sides(case: BenchCase, warmup: list[tuple], backend: str, rounds: int,
                   profile_calls: int, target_ms: float,
                   tick: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    torch._dynamo.reset()
    sides: list[Side] = []
    out: dict[str, dict[str, Any]] = {}
    inputs = case.inputs()
    for name in SIDES:
        tick(f"compile + warm up: {name}")
        try:
            side = Side(name, case, backend, inputs)
            side.warm(warmup)
            if side.stance:
                side.call()()  # compiled: the stance now serves with its own checks
            sides.append(side)
            out[name] = {"status": "ok"}
            if side.warmup_errors:
                out[name]["warmup_errors"] = side.warmup_errors
        except Exception as e:  # noqa: BLE001 - recorded, never raised
            out[name] = {"status": "error", "error": f"{type(e).__name__}: {e}"}
    if not any(s.captured for s in sides):
        # Nothing to time (e.g. a function of Python numbers: Dynamo skips it).
        errors = "; ".join(f"{k}: {v['error']}" for k, v in out.items() if "error" in v)
        raise ValueError("no side built a compile unit on the example inputs (Dynamo "
                         "traced no graph from them)" + (f"; {errors}" if errors else ""))
    plugin.wait_for_tier_up()
    for s in sides:
        fix_frame_locals(s.case, s.captured)
    calls = [s.call() for s in sides]
    tick("cache lookup and pre-graph bytecode (profiler)")
    events: list[list[int]] = []
    pregraph: list[list[float]] = []
    per = interleaved_lookups(calls, rounds, profile_calls, events, pregraph)
    for s, lk, ev, pre in zip(sides, per, events, pregraph):
        seen = min(ev) / profile_calls if ev else 0.0
        out[s.name]["lookup_events_per_call"] = seen
        out[s.name]["pregraph_us"] = statistics.median(pre)
        out[s.name]["lookup_us"] = statistics.median(lk) if seen >= 1 else None
        if seen < 1:
            out[s.name]["lookup_note"] = GUARDLESS_NOTE
    tick("guard check")
    checked = [(s, s.check()) for s in sides]
    checked = [(s, c) for s, c in checked if c is not None]
    meds, _ = interleaved_many([c for _, c in checked], rounds, target_ms)
    for (s, _), m in zip(checked, meds):
        out[s.name]["check_us"] = m
        out[s.name]["units"] = len(s.captured)
    for s in sides:
        out[s.name].setdefault("check_us", None)
        out[s.name]["units"] = len(s.captured)
    tick("whole call")
    meds, ratios = interleaved_many(calls, rounds, max(target_ms, 5.0))
    for s, m, r in zip(sides, meds, ratios):
        out[s.name]["call_us"] = m
        out[s.name]["call_ratio_vs_torch"] = (statistics.median(r)
                                              if sides[0].name == "torch" else None)
    return out
