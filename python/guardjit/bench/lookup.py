"""The "TorchDynamo Cache Lookup" profiler event, per call (docs/performance.md, "How it is measured").

Shared by ``python -m guardjit bench`` (run.py) and its ``--suite diffsets``
workers; imports nothing of guardjit's plugin, so a plain-torch process can
use it unchanged.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

LOOKUP_EVENT = "TorchDynamo Cache Lookup"
# Dynamo's event around the transformed code's bytecode before the graph
# call (torch/_dynamo/codegen.py, ``config.record_runtime_overhead``): it
# rebuilds the graph's inputs from the frame (torch/_dynamo/utils.py
# ``record_pregraph_bytecode_enter``). A frame with no graph input has none.
PREGRAPH_EVENT = "Pregraph bytecode"


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silences the profiler's start/stop lines (written by C++ to fd 2)."""
    import os

    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@contextlib.contextmanager
def _no_guardjit_events() -> Iterator[None]:
    """Turns guardjit's own profiler events off (python/src/NativeGuard.cpp):
    a "guardjit check" child would take guardjit's check out of the lookup's
    self time, and its recording cost only guardjit's side would pay."""
    core = sys.modules.get("guardjit._core")
    if core is None:  # a plain-torch process
        yield
        return
    previous = core.set_profiler_events(False)
    try:
        yield
    finally:
        core.set_profiler_events(previous)


def profile_lookup_us(fn: Callable[[], object], calls: int,
                      events: list[int] | None = None,
                      pregraph: list[float] | None = None) -> float:
    """Self CPU µs of "TorchDynamo Cache Lookup" per call of ``fn``; appends
    to ``events`` how many such events the ``calls`` calls recorded (fewer
    than ``calls`` when torch served some without the event: its guardless
    fast path). guardjit's own events are off meanwhile: the lookup's self
    time holds guardjit's whole check, as it holds Dynamo's. With
    ``pregraph``, also appends the µs per call of the "Pregraph bytecode"
    events (their whole duration: the bytecode and its two recording calls)."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), _no_guardjit_events(), \
            profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    raw = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if raw is None:
        evs = [e for e in prof.events() if e.name == LOOKUP_EVENT]
        if events is not None:
            events.append(len(evs))
        if pregraph is not None:
            pregraph.append(sum(e.cpu_time_total for e in prof.events()
                                if e.name == PREGRAPH_EVENT) / calls)
        return sum(e.self_cpu_time_total for e in evs) / calls
    raw_events = raw.events()
    if events is not None:
        events.append(sum(1 for e in raw_events if e.name() == LOOKUP_EVENT))
    if pregraph is not None:
        pregraph.append(sum(e.end_ns() - e.start_ns() for e in raw_events
                            if e.name() == PREGRAPH_EVENT) / 1e3 / calls)
    return raw_self_us(raw_events, LOOKUP_EVENT) / calls


def raw_self_us(events: Any, name: str) -> float:
    """Total self time (µs) of the events called ``name``, from raw kineto events.

    The same number as ``sum(e.self_cpu_time_total for e in prof.events() if
    e.name == name)``: an event's duration minus that of its direct children
    (events of the same thread nested inside it). It skips ``prof.events()``,
    which builds a Python object per op event and dominated the benchmark's
    run time on the eager models (thousands of op events per profiled call).
    """
    by_thread: dict[int, list[tuple[int, int, bool]]] = {}
    for e in events:
        by_thread.setdefault(e.start_thread_id(), []).append(
            (e.start_ns(), e.end_ns(), e.name() == name))
    total_ns = 0
    for evs in by_thread.values():
        if not any(is_target for _, _, is_target in evs):
            continue
        evs.sort(key=lambda t: (t[0], -t[1]))
        stack: list[list] = []  # [end, is_target, children_ns]
        for start, end, is_target in evs:
            while stack and stack[-1][0] <= start:
                done = stack.pop()
                if done[1]:
                    total_ns += done[3] - done[2]
            if stack:
                stack[-1][2] += end - start
            stack.append([end, is_target, 0, end - start])
        for done in stack:
            if done[1]:
                total_ns += done[3] - done[2]
    return total_ns / 1e3
