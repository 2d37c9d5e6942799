"""The end-to-end sample: a mutated case runs through ``torch.compile``
(guardjit's, ``backend="eager"``) and eager, and the results must be equal.

Only a case whose chosen unit is the target's entry frame, with ``self``
unchanged, can be expressed as a call (:func:`targets.call_args`); the
frame-local mutations become the call's arguments and the state mutations
stay applied during both calls. Both calls raising counts as agreement (the
program is invalid in that state); one raising is a disagreement, and so is
a different result (``routing.same_result``: dtype included, NaNs equal).
The compiled call may recompile: that is what a wrong "pass" would skip.
Plain ``torch.compile`` of the same entry with the same options (its own
cache entries) is called on every sample too; where guardjit's result is
not eager's but exactly plain torch's (an unsafe filter serving a graph
compiled for another state, a Dynamo error), that is torch's behaviour and is
counted apart, not as a disagreement.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from guardjit.fuzz import oracle
from guardjit.fuzz.mutations import Case, Undo
from guardjit.fuzz.targets import Target, call_args
from guardjit.lab import routing


@dataclasses.dataclass
class Result:
    ok: bool
    eager: str  # "value" or "raise T"
    compiled: str
    # Plain torch.compile in the same state when guardjit's result is not
    # eager's: "same" when it does exactly what guardjit's did (an unsafe
    # filter, a Dynamo error): then it is torch's behaviour, not guardjit's.
    torch: str = ""

    def __repr__(self) -> str:
        return (f"e2e ok={self.ok} eager={self.eager} compiled={self.compiled}"
                + (f" plain torch={self.torch}" if self.torch else ""))


def _call(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, str]:
    try:
        return fn(*args, **kwargs), "value"
    except Exception as e:  # noqa: BLE001 - a raise is a result too
        return None, f"raise {type(e).__name__}"


def eligible(target: Target, case: Case) -> bool:
    """The case's unit is the entry frame, no step wraps a builtin (with
    ``str`` or ``type`` a lambda, every ``isinstance(x, str)`` raises, in the
    sample's own calls (``inspect.signature``) as in torch and the model), and
    no step makes a tensor a meta tensor or makes meta the default device
    (eager's result is then undefined);
    the check level still covers such cases."""
    unit = target.units[case.unit]
    if any(s.op == "o.wrap" and "__builtins" in s.source for s in case.steps):
        return False
    # A meta tensor has no data: eager reads whatever memory its kernels
    # find (seed 7: a Linear with a meta weight returned -1.7e38 on CPU), so
    # no result of such a call can be compared.
    if any(s.op == "t.meta" for s in case.steps):
        return False
    # Under the meta default device a later step's factory call (t.strided's
    # torch.zeros) makes a meta tensor too: an nn.Embedding with CPU weights
    # takes meta indices and returns undefined data (fuzz seed 5 on 2.14.1:
    # eager gave -0.529, then NaN).
    if any(s.op == "g.default_device" for s in case.steps):
        return False
    return unit.code is target.entry_function().__code__


@dataclasses.dataclass
class Calls:
    """The raw results of one sample: eager, the target's compiled callable
    and (when the target has it) plain ``torch.compile``; ``how_*`` is
    ``"value"``, ``"raise T"`` or ``""`` (not called)."""

    ref: Any
    how_ref: str
    out: Any
    how_out: str
    plain: Any = None
    how_plain: str = ""


def calls(target: Target, case: Case) -> Calls | None:
    """Runs the sample's calls in the mutated state (None: not expressible as
    a call of the entry)."""
    if not eligible(target, case):
        return None
    undo = Undo()
    try:
        env, _, _ = oracle.apply_steps(target, case, undo)
        call = call_args(target, env.f_locals)
        if call is None:
            return None
        args, kwargs = call
        # Each call starts from the same buffers (train-mode BatchNorm
        # updates its running stats in place).
        import torch

        try:
            bufs = ([(b, b.detach().clone()) for b in target.entry.buffers()]
                    if isinstance(target.entry, torch.nn.Module) else [])
        except Exception:  # noqa: BLE001 - a mutation broke the module's dicts
            bufs = []

        def reset() -> None:
            with torch.no_grad():
                for b, v in bufs:
                    if b.shape == v.shape and b.dtype == v.dtype:
                        b.copy_(v)
        ref, how_ref = _call(target.entry, args, kwargs)
        reset()
        out, how_out = _call(target.compiled, args, kwargs)
        reset()
        # Plain torch is called on every sample, so its cache sees the same
        # history as guardjit's (an unsafe filter serves what was compiled).
        plain, how_plain = _call(target.plain, args, kwargs) if target.plain is not None \
            else (None, "")
        reset()
    finally:
        undo.run()
    return Calls(ref, how_ref, out, how_out, plain, how_plain)


def same(how_a: str, a: Any, how_b: str, b: Any) -> bool:
    """Both raised (any type), or both returned equal results."""
    if how_a != "value" or how_b != "value":
        return how_a != "value" and how_b != "value"
    return routing.same_result(a, b)


def run(target: Target, case: Case) -> Result | None:
    c = calls(target, case)
    if c is None:
        return None
    ok = same(c.how_ref, c.ref, c.how_out, c.out)
    if ok or not c.how_plain:
        return Result(ok, c.how_ref, c.how_out)
    same_as_torch = c.how_plain == c.how_out and (
        c.how_out != "value" or routing.same_result(c.plain, c.out))
    return Result(False, c.how_ref, c.how_out, "same" if same_as_torch else c.how_plain)
