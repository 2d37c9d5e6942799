"""Interleaved A/B timing (docs/performance.md, "How it is measured").

A and B alternate in rounds; each round times a batch of calls with
``time.perf_counter_ns``. Reported: median µs per call of each side, the
median of the per-round ratios A/B and its min-max spread. The first rounds
are discarded as warm-up.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable


@dataclasses.dataclass
class ABResult:
    a_us: float  # median µs per call of A
    b_us: float  # median µs per call of B
    ratio: float  # median of per-round (A / B)
    ratio_min: float
    ratio_max: float
    rounds: int
    batch: int


def _batch_ns(fn: Callable[[], object], batch: int) -> int:
    start = time.perf_counter_ns()
    for _ in range(batch):
        fn()
    return time.perf_counter_ns() - start


def calibrate(fn: Callable[[], object], target_ms: float = 2.0) -> int:
    """Calls per batch so that one batch of ``fn`` takes about ``target_ms``."""
    n = 1
    while True:
        ns = _batch_ns(fn, n)
        if ns >= target_ms * 1e6 or n >= 1 << 20:
            return max(1, int(n * target_ms * 1e6 / max(ns, 1)))
        n *= 4


def interleaved(a: Callable[[], object], b: Callable[[], object], rounds: int = 31,
                warmup: int = 3, target_ms: float = 2.0) -> ABResult:
    batch = max(1, min(calibrate(a, target_ms), calibrate(b, target_ms)))
    a_per, b_per, ratios = [], [], []
    for r in range(warmup + rounds):
        ta = _batch_ns(a, batch)
        tb = _batch_ns(b, batch)
        if r < warmup:
            continue
        a_per.append(ta / batch / 1e3)
        b_per.append(tb / batch / 1e3)
        ratios.append(ta / max(tb, 1))
    return ABResult(statistics.median(a_per), statistics.median(b_per), statistics.median(ratios),
                    min(ratios), max(ratios), rounds, batch)
