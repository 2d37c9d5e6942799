"""The end-to-end sample: a mutated case runs through ``torch.compile``
(guardjit's, ``backend="eager"``) and eager, and the results must be equal.

Only a case whose chosen unit is the target's entry frame, with ``self``
unchanged, can be expressed as a call (:func:`targets.call_args`); the
frame-local mutations become the call's arguments and the state mutations
stay applied during both calls. Both calls raising counts as agreement (the
program is invalid in that state); one raising is a disagreement, and so is
a different result (``routing.same_result``: dtype included, NaNs equal).
The compiled call may recompile: that is what a wrong "pass" would skip.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from guardjit import routing
from guardjit.fuzz import oracle
from guardjit.fuzz.mutations import Case, Undo
from guardjit.fuzz.targets import Target, call_args


@dataclasses.dataclass
class Result:
    ok: bool
    eager: str  # "value" or "raise T"
    compiled: str

    def __repr__(self) -> str:
        return f"e2e ok={self.ok} eager={self.eager} compiled={self.compiled}"


def _call(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, str]:
    try:
        return fn(*args, **kwargs), "value"
    except Exception as e:  # noqa: BLE001 - a raise is a result too
        return None, f"raise {type(e).__name__}"


def eligible(target: Target, case: Case) -> bool:
    unit = target.units[case.unit]
    return unit.code is target.entry_function().__code__


def run(target: Target, case: Case) -> Result | None:
    if not eligible(target, case):
        return None
    undo = Undo()
    try:
        env, _, _ = oracle.apply_steps(target, case, undo)
        call = call_args(target, env.f_locals)
        if call is None:
            return None
        args, kwargs = call
        ref, how_ref = _call(target.entry, args, kwargs)
        out, how_out = _call(target.compiled, args, kwargs)
    finally:
        undo.run()
    if how_ref != "value" or how_out != "value":
        return Result(how_ref != "value" and how_out != "value", how_ref, how_out)
    return Result(routing.same_result(out, ref), how_ref, how_out)
