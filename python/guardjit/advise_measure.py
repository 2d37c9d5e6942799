"""Step 1 of ``guardjit.advise``: the cache lookup, the guard check and the whole call per side.

The sides are the bench's (:mod:`guardjit.bench.options`, :mod:`guardjit.bench.run`):
plain ``torch.compile``, torch with each option of its guide to guard
overhead (``use_recursive_dict_tags_for_guards``; ``install_free_tensors``
with ``skip_guard_on_all_nn_modules_unsafe``; the ``skip_guard_eval_unsafe``
stance after warm-up) and ``guardjit.compile`` (default). Each side compiles
the same module with a backend of its own (``SideBackend``: no shared cache
entries), is called on the example and every warm-up input, and then, in one
process and interleaved (docs/performance.md, "How it is measured"):

* ``lookup_us``: self CPU time of the "TorchDynamo Cache Lookup" profiler
  event per call (``bench.lookup``); None where torch served the call
  without that event (its guardless fast path, ``lookup_note``);
* ``check_us``: the unit's root check on its frame locals, as the cache
  entry runs it (guardjit's root for guardjit, Dynamo's for the others);
  None for the stance (it checks no root of its own);
* ``call_us``: the whole call, and ``call_ratio_vs_torch`` its per-round
  ratio to plain torch (median).
"""

from __future__ import annotations

import statistics
import time
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
# Side names, in the report's order; the option sides use torch's names.
SIDES = ("torch", DICT_TAGS, UNSAFE, STANCE, "guardjit")


def _stance() -> Any:
    return torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)


class Side:
    """One compiled model and how to call it on the example inputs."""

    def __init__(self, name: str, case: BenchCase, backend: str) -> None:
        self.name = name
        self.captured: list[Captured] = []
        self.config: dict = {}
        kwargs: dict = {}
        if name == "guardjit":
            self.model = guardjit.compile(case.model, backend=SideBackend(backend, name))
        else:
            if name in (DICT_TAGS, UNSAFE):
                kwargs, self.config = option_kwargs(name)
            # The stance runs plain torch's model under set_stance.
            self.model = torch.compile(case.model, backend=SideBackend(backend, name), **kwargs)
        self.args, self.kwargs = case.inputs()

    def warm(self, inputs: list[tuple]) -> None:
        """Compiles on the example and every warm-up input (the stance's
        model is warmed without the stance: the guide's order)."""
        with torch._dynamo.config.patch(**self.config), capture_units() as got:
            self.model(*self.args, **self.kwargs)
        self.captured = got
        with torch._dynamo.config.patch(**self.config):
            for args in inputs:
                self.model(*args, **self.kwargs)

    def call(self) -> Callable[[], object]:
        model, args, kwargs = self.model, self.args, self.kwargs
        if self.name == STANCE:
            def run() -> object:
                with _stance():
                    return model(*args, **kwargs)
            return run
        return lambda: model(*args, **kwargs)

    def check(self) -> Callable[[], object] | None:
        if self.name == STANCE or not self.captured:
            return None
        roots = [((c.final_root if self.name == "guardjit" else c.dynamo_root).check, c.f_locals)
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
    torch._dynamo.reset()
    sides: list[Side] = []
    out: dict[str, dict[str, Any]] = {}
    for name in SIDES:
        tick(f"compile + warm up: {name}")
        try:
            side = Side(name, case, backend)
            side.warm(warmup)
            if name == STANCE:
                side.call()()  # compiled: the stance now serves without guards
            sides.append(side)
            out[name] = {"status": "ok"}
        except Exception as e:  # noqa: BLE001 - recorded, never raised
            out[name] = {"status": "error", "error": f"{type(e).__name__}: {e}"}
    if not any(s.captured for s in sides):
        # Nothing to time (e.g. a function of Python numbers: Dynamo skips it).
        errors = "; ".join(f"{k}: {v['error']}" for k, v in out.items() if "error" in v)
        raise ValueError("no side built a compile unit on the example inputs (Dynamo "
                         "traced no graph from them)" + (f"; {errors}" if errors else ""))
    plugin.wait_for_tier_up()
    for s in sides:
        fix_frame_locals(case, s.captured)
    calls = [s.call() for s in sides]
    tick("cache lookup (profiler)")
    events: list[list[int]] = []
    per = interleaved_lookups(calls, rounds, profile_calls, events)
    for s, lk, ev in zip(sides, per, events):
        seen = min(ev) / profile_calls if ev else 0.0
        out[s.name]["lookup_events_per_call"] = seen
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
    tick("whole call")
    meds, ratios = interleaved_many(calls, rounds, max(target_ms, 5.0))
    for s, m, r in zip(sides, meds, ratios):
        out[s.name]["call_us"] = m
        out[s.name]["call_ratio_vs_torch"] = (statistics.median(r)
                                              if sides[0].name == "torch" else None)
    return out
