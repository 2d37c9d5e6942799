"""Cases across tier swaps (``python -m guardjit fuzz --tier-swaps``).

A target's ``native`` checker is the code the background tier left in place
(targets.build waits for it). With tier swaps, every unit also gets a
``swapping`` checker: a fresh ``_core.make_guard(bound, None)`` callable,
which runs the interpreter until ``_core.start_native(check, "light", "O1")``
swaps in light code and then O1 code from guardjit's background thread. A
unit's callable is replaced by a fresh one once it has served ``batch``
cases and reached O1, so the cases keep running on the interpreter, on light
code and on O1 code while the swaps land between and during them (the
oracle asks each unit's checkers in turn while the background thread
compiles). Its answer is compared with Dynamo's like every other checker's.

The first call of each new code also runs the interpreter, and when the two
disagree the interpreter's answer stands and the code is dropped
(``tier_up_stats()["distrusted"]``). Such a disagreement would not show in
the ``swapping`` answer, so the driver counts the growth of ``distrusted``
during a target as disagreements too (``swap_distrusted``).

Counts (driver.Summary): ``swap_callables`` made, ``swap_calls_<level>``
(the level the callable ran at when asked: ``interpreter``, ``light``,
``O1``), ``swaps_observed`` (a callable asked at one level and next at a
higher one: a swap landed between two of its calls, within the cases) and
``swap_distrusted``.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from guardjit import _core
from guardjit.fuzz.targets import Target

FIRST, THEN = "light", "O1"
_RANK = {"interpreter": 0, "O0": 1, "light": 2, "O1": 3, "O2": 4}


class TierSwaps:
    """The ``swapping`` checkers of one target's units."""

    def __init__(self, target: Target, batch: int = 8):
        self.batch = max(1, batch)
        # The bound set behind each unit's interpreter (None: on Dynamo's path).
        self.bounds = [getattr(u.interpret, "__self__", None) if u.status != "dynamo" else None
                       for u in target.units]
        self.checks: list[Any] = [None] * len(self.bounds)
        self.last_level: list[str | None] = [None] * len(self.bounds)
        self.born = [0] * len(self.bounds)  # the case each callable was made at
        self.counts: collections.Counter = collections.Counter()
        self.distrusted_at_start = _core.tier_up_stats()["distrusted"]

    def before_case(self, i: int) -> None:
        """A fresh callable per unit is due once the previous one ran at
        least ``batch`` cases and reached the last tier (or after
        ``50 * batch`` cases, should a compile fail). It is made, and its
        swaps queued, at the unit's next call (``_swapping``): that call then
        runs the interpreter, and the swaps land between it and later ones
        (made here, a unit the oracle asks only later would often find its
        code already swapped in, and no swap would be seen)."""
        for k, bound in enumerate(self.bounds):
            if bound is None:
                continue
            age = i - self.born[k]
            if self.checks[k] is not None and age < 50 * self.batch and (
                    age < self.batch or _core.guard_level(self.checks[k]) != THEN):
                continue
            self.checks[k] = None
            self.born[k] = i
            self.last_level[k] = None

    def _swapping(self, k: int) -> Callable[[dict], Any]:
        def swapping(f_locals: dict) -> Any:
            check = self.checks[k]
            if check is None:
                check = self.checks[k] = _core.make_guard(self.bounds[k], None)
                if _core.start_native(check, FIRST, THEN):
                    self.counts["swap_callables"] += 1
            level = _core.guard_level(check) or "interpreter"
            prev = self.last_level[k]
            if prev is not None and _RANK[level] > _RANK[prev]:
                self.counts["swaps_observed"] += 1
            self.last_level[k] = level
            self.counts[f"swap_calls_{level}"] += 1
            return check(f_locals)

        return swapping

    def override(self, inner: Any = None) -> Callable[[int, dict], dict]:
        """An oracle CheckerOverride adding ``swapping`` (after ``inner``)."""

        def add(i: int, checkers: dict) -> dict:
            if inner is not None:
                checkers = inner(i, checkers)
            if self.bounds[i] is None:
                return checkers
            return {**checkers, "swapping": self._swapping(i)}

        return add

    def distrusted(self) -> int:
        """New code distrusted since this target started (each one a native
        answer that differed from the interpreter's on its first call)."""
        return _core.tier_up_stats()["distrusted"] - self.distrusted_at_start
