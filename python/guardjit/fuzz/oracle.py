"""The check-level oracle: Dynamo's root, guardjit's interpreter, its native
check and the installed root must give the same answer.

One :class:`Case` is a target unit and a list of mutation steps. Running it
(:func:`run_case`) copies the unit's compile-time frame locals, applies the
steps (:mod:`guardjit.fuzz.mutations`), asks every checker of **every** unit
of the target (the chosen unit sees the mutated frame locals, the others
their own compile-time ones; the object, global and grad-mode... mutations
are seen by all), and undoes the steps. Dynamo's answer is the oracle; an
answer is ``True``, ``False`` or ``"raise <Type>"``. No checker other than
Dynamo's is ever trusted: a case disagrees when any answer of a unit differs
from its Dynamo answer.

Subtree skipping (docs/subtree-skipping.md) answers from its residual check
only after a passing full check recorded a snapshot and while the recorded
dicts, types and pointers still hold. So before the steps, the installed
root of every unit with a skip plan is checked twice on its unmutated
compile-time frame locals (:func:`prime_skipping`): the first call records a
snapshot of the unchanged state (after a fallback when the previous case
changed it), the second validates it and runs the residual check. Both must
pass, as Dynamo does there. The first skip-path call on the case's state
(``native``, else ``root``) then either validates the snapshot and answers
from the residual check (``skip = "hit"``), finds a recorded dict, type or
pointer changed and runs the full check (``"fallback"``), or has no snapshot
and runs the full check (``"full"``): :attr:`UnitAnswers.skip`.

``checkers`` can be overridden per unit (:class:`Verdict` names them), which
is how the test shows a deliberately wrong checker is caught.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from guardjit.fuzz import mutations
from guardjit.fuzz.mutations import Case, Env, Inapplicable, Undo
from guardjit.fuzz.targets import Target


@dataclasses.dataclass
class UnitAnswers:
    unit: int
    name: str
    answers: dict[str, Any]  # checker name -> True | False | "raise T"
    # Dynamo's whole tree (check_verbose, which skips no subtree), asked only
    # when Dynamo's check passes and another checker does not.
    dynamo_full: Any = None
    # Subtree skipping: how the first skip-path call on the case's state was
    # answered ("hit": validation + residual check, "fallback": a recorded
    # dict/type/pointer had changed, the full check ran, "full": no snapshot,
    # the full check ran); None when the unit has no skip plan.
    skip: str | None = None
    # The installed root on the unmutated frame locals before the steps
    # (prime_skipping), and Dynamo's answer there when one of them is not
    # True (it passes there otherwise: base_ok after every case).
    base: list[Any] = dataclasses.field(default_factory=list)
    base_dynamo: Any = True

    @property
    def expected(self) -> Any:
        return self.answers["dynamo"]

    @property
    def base_disagrees(self) -> bool:
        return any(a != self.base_dynamo for a in self.base)

    @property
    def disagrees(self) -> bool:
        return any(a != self.expected for a in self.answers.values()) or self.base_disagrees

    @property
    def stale_tag_pass(self) -> bool:
        """Dynamo's check passed only through its dict-tag fast path
        (``use_recursive_dict_tags_for_guards``): its own whole tree fails,
        and so does every guardjit checker. A mutation no dict version sees
        (``__class__`` reassigned, ``__defaults__`` changed in place) leaves
        the tags as they were; guardjit recompiles, torch would serve the old
        graph. Torch's behaviour, counted apart."""
        return (self.expected is True and self.dynamo_full is False and not self.base_disagrees
                and all(a is False for k, a in self.answers.items() if k != "dynamo"))


@dataclasses.dataclass
class Verdict:
    case: Case
    applied: int  # steps that applied
    skipped: list[str]  # steps that did not fit (Inapplicable)
    units: list[UnitAnswers]
    undo_errors: list[str]

    @property
    def disagrees(self) -> bool:
        return any(u.disagrees for u in self.units)

    @property
    def only_stale_tag_passes(self) -> bool:
        """Every unit that disagrees is a stale pass of torch's dict-tag fast
        path (UnitAnswers.stale_tag_pass)."""
        return self.disagrees and all(u.stale_tag_pass for u in self.units if u.disagrees)

    @property
    def chosen(self) -> UnitAnswers:
        return next(u for u in self.units if u.unit == self.case.unit)

    def summary(self) -> str:
        parts = []
        for u in self.units:
            if u.disagrees:
                parts.append(f"unit {u.name}{f' (skip: {u.skip})' if u.skip else ''}: "
                             + ", ".join(f"{k}={v}" for k, v in u.answers.items())
                             + (f"; unmutated: root={u.base}, dynamo={u.base_dynamo}"
                                if u.base_disagrees else ""))
        return "; ".join(parts)


def answer(fn: Callable[[dict], Any], f_locals: dict) -> Any:
    try:
        return bool(fn(f_locals))
    except Exception as e:  # noqa: BLE001 - a raise is an answer too
        return f"raise {type(e).__name__}"


CheckerOverride = Callable[[int, dict[str, Callable[[dict], Any]]],
                           dict[str, Callable[[dict], Any]]]


def apply_steps(target: Target, case: Case, undo: Undo) -> tuple[Env, int, list[str]]:
    unit = target.units[case.unit]
    env = Env(dict(unit.f_locals), unit.scope)
    applied, skipped = 0, []
    for step in case.steps:
        undo.label(str(step))
        try:
            mutations.apply(step, env, undo)
            applied += 1
        except Inapplicable as e:
            skipped.append(f"{step}: {e}")
        except Exception as e:  # noqa: BLE001 - e.g. torch refusing a conversion
            skipped.append(f"{step}: {type(e).__name__}: {e}")
    return env, applied, skipped


def prime_skipping(target: Target) -> list[tuple[list[Any], Any]]:
    """Per unit, the installed root's answers on its unmutated compile-time
    frame locals, asked twice when the unit has a skip plan (else none), and
    Dynamo's answer there when one of them is not True (else True: Dynamo
    passes there, base_ok after every case). The first call records a
    snapshot of the unchanged state, the second answers from it, so the
    case's mutations meet a snapshot of the state before them, as a model's
    next call after a mutation does."""
    out: list[tuple[list[Any], Any]] = []
    for u in target.units:
        if u.skip_stats() is None:
            out.append(([], True))
            continue
        fl = dict(u.f_locals)
        got = [answer(u.root.check, fl), answer(u.root.check, fl)]
        out.append((got, True if all(a is True for a in got)
                    else answer(u.dynamo_root.check, fl)))
    return out


def _skip_path(before: dict, after: dict) -> str:
    if after["hits"] > before["hits"]:
        return "hit"
    return "fallback" if after["fallbacks"] > before["fallbacks"] else "full"


def _answers(u: Any, checkers: dict[str, Callable[[dict], Any]],
             fl: dict) -> tuple[dict[str, Any], str | None]:
    """Every checker's answer, and how the first call of the unit's real
    skipping check (``native``, else ``root``, unless overridden) went."""
    real = {"native": u.native, "root": u.root.check if u.root is not None else None}
    out, skip = {}, None
    for k, fn in checkers.items():
        first = (skip is None and k in real and fn is not None and fn == real[k])
        before = u.skip_stats() if first else None
        out[k] = answer(fn, fl)
        if before is not None:
            skip = _skip_path(before, u.skip_stats())
    return out, skip


def run_case(target: Target, case: Case, override: CheckerOverride | None = None,
             after: Callable[[Env], None] | None = None) -> Verdict:
    """Primes every unit's subtree skipping on the unmutated state
    (prime_skipping), applies ``case``, asks every checker of every unit,
    undoes the case. ``after(env)`` runs with the mutations applied (the
    end-to-end sample). Under the ``dict_tags`` option, a unit Dynamo passes
    and another checker does not is also asked of Dynamo's whole tree
    (UnitAnswers.dynamo_full)."""
    dict_tags = target.spec.option == "dict_tags"
    base = prime_skipping(target)
    undo = Undo()
    try:
        env, applied, skipped = apply_steps(target, case, undo)
        results = []
        for i, u in enumerate(target.units):
            fl = env.f_locals if i == case.unit else dict(u.f_locals)
            checkers = u.checkers()
            if override is not None:
                checkers = override(i, checkers)
            got, skip = _answers(u, checkers, fl)
            ua = UnitAnswers(i, u.name, got, skip=skip, base=base[i][0], base_dynamo=base[i][1])
            if ua.disagrees and ua.expected is True and dict_tags:
                try:
                    ua.dynamo_full = bool(u.dynamo_root.check_verbose(fl).result)
                except Exception as e:  # noqa: BLE001 - a raise is an answer too
                    ua.dynamo_full = f"raise {type(e).__name__}"
            results.append(ua)
        if after is not None:
            after(env)
    finally:
        errors = undo.run()
    return Verdict(case, applied, skipped, results,
                   [f"undoing {getattr(e, 'undo_step', '?')}: {e!r}" for e in errors])


def base_ok(target: Target) -> list[str]:
    """Units whose Dynamo root no longer passes on its compile-time frame
    locals (a mutation that was not undone)."""
    return [u.name for u in target.units if answer(u.dynamo_root.check, dict(u.f_locals)) is not True]


def differing_guards(target: Target, case: Case, verdict: Verdict) -> list[str]:
    """What tells the answers apart: Dynamo's failing guard
    (``check_verbose``) and the guardjit IR lines that read a mutated source."""
    out = []
    undo = Undo()
    try:
        env, _, _ = apply_steps(target, case, undo)
        for ua in verdict.units:
            if not ua.disagrees:
                continue
            u = target.units[ua.unit]
            fl = env.f_locals if ua.unit == case.unit else dict(u.f_locals)
            try:
                info = u.dynamo_root.check_verbose(fl)
                if not info.result:
                    out.append(f"unit {u.name}: Dynamo fails on "
                               + " | ".join(info.verbose_code_parts)[:600])
                else:
                    out.append(f"unit {u.name}: Dynamo's tree passes "
                               f"({info.num_guards_executed} guards run)")
            except Exception as e:  # noqa: BLE001
                out.append(f"unit {u.name}: check_verbose raised {e!r}")
            srcs = {s.source for s in case.steps if s.source}
            lines = [ln.strip() for ln in u.ir_text.splitlines()
                     if any(s and s in ln for s in srcs)]
            if lines:
                out.append(f"unit {u.name}: guardjit IR reading the mutated sources:\n    "
                           + "\n    ".join(lines[:12]))
    finally:
        undo.run()
    return out
