"""Disagreements as minimal, self-contained reproducers.

:func:`minimize` drops mutation steps one at a time while the case still
disagrees. :func:`write` saves a Python file that holds the case as JSON (the
target key, the generated program's text when it is one, the steps, the
answers seen and the guard that tells them apart) and replays it with
:func:`replay` when run: ``python FILE.py`` (or ``python -m guardjit fuzz
--replay FILE.py``) rebuilds the target, applies the steps, prints every
checker's answer and exits 1 while the disagreement is still there.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from guardjit.fuzz.mutations import Case

_TEMPLATE = '''\
"""guardjit fuzz reproducer ({kind}): {key}

{summary}

Steps:
{steps}

{guards}
Replay: python {name}   (exit status 1 while guardjit still disagrees)
"""

import sys

from guardjit.fuzz import reproducer

DATA = {data}

if __name__ == "__main__":
    sys.exit(reproducer.replay_main(DATA))
'''


def minimize(case: Case, disagrees: Callable[[Case], bool]) -> Case:
    """The case with every step whose removal keeps the disagreement dropped."""
    steps = list(case.steps)
    i = 0
    while i < len(steps) and len(steps) > 1:
        trial = Case(case.unit, steps[:i] + steps[i + 1:])
        if disagrees(trial):
            steps = trial.steps
        else:
            i += 1
    return Case(case.unit, steps)


def write(out_dir: str, kind: str, key: str, data: dict, summary: str,
          steps: list[str], guards: list[str]) -> str:
    os.makedirs(out_dir, exist_ok=True)
    stem = f"{kind}-{key.replace(':', '-')}"
    n = 0
    while os.path.exists(os.path.join(out_dir, f"{stem}-{n}.py")):
        n += 1
    name = f"{stem}-{n}.py"
    path = os.path.join(out_dir, name)
    text = _TEMPLATE.format(
        kind=kind, key=key, summary=summary, name=name,
        steps="\n".join(f"  {i + 1}. {s}" for i, s in enumerate(steps)) or "  (none)",
        guards=("Differing guard:\n" + "\n".join(f"  {g}" for g in guards) + "\n") if guards
        else "", data=json.dumps(data, indent=1).replace('"""', '\\"\\"\\"'))
    # JSON true/false/null must be Python literals in the file.
    text = text.replace(": true", ": True").replace(": false", ": False").replace(": null", ": None")
    with open(path, "w") as f:
        f.write(text)
    return path


def check_data(key: str, case: Case, verdict: Any, program_source: str | None) -> dict:
    return {"kind": "check", "target": key, "case": case.as_dict(),
            "answers": [{"unit": u.name, **u.answers, "skip": u.skip, "unmutated": u.base}
                        for u in verdict.units if u.disagrees],
            "program_source": program_source}


def replay(data: dict) -> tuple[bool, str]:
    """(still disagrees, what each checker answers now)."""
    if data["kind"] == "check":
        from guardjit.fuzz import oracle, targets

        target = targets.TargetSpec.parse(data["target"]).build()
        try:
            verdict = oracle.run_case(target, Case.from_dict(data["case"]))
            lines = [f"unit {u.name}: " + ", ".join(f"{k}={v}" for k, v in u.answers.items())
                     for u in verdict.units]
            return verdict.disagrees, "\n".join(lines)
        finally:
            target.close()
    if data["kind"] == "stance":
        from guardjit.fuzz import stance_oracle

        kind, name, policy = data["target"].split(":")
        target = stance_oracle.build(kind, name, policy, data["seed"])
        try:
            v = stance_oracle.run_case(target, data["order"], data["probe"])
            lines = [f"{c.input}: cache {c.cache_order} expected {c.expected} served {c.served} "
                     f"result_ok={c.result_ok} error={c.error}" for c in v.calls]
            return v.disagrees, "\n".join(lines)
        finally:
            target.close()
    if data["kind"] == "e2e":
        from guardjit.fuzz import e2e, isolate, targets

        # The samples run on the target before this one, in order: torch's
        # cache history decides which graph runs.
        history = data.get("history") or [data["case"]]
        target = targets.TargetSpec.parse(data["target"]).build()
        try:
            r = None
            for d in history:
                r = e2e.run(target, Case.from_dict(d))
        finally:
            target.close()
        if r is None or r.ok or r.torch == "same":
            return False, repr(r)
        iso = isolate.classify(data["target"], data.get("program_source"), history)
        return not iso.torch_behaviour, f"{r!r}\n{iso!r}" + (
            "\n(plain torch alone is wrong exactly as guardjit: torch's behaviour)"
            if iso.torch_behaviour else "")
    raise ValueError(f"unknown reproducer kind {data['kind']!r}")


def replay_main(data: dict) -> int:
    disagrees, text = replay(data)
    print(text)
    print("STILL DISAGREES" if disagrees else "agrees now")
    return 1 if disagrees else 0


def replay_file(path: str) -> int:
    ns: dict[str, Any] = {"__name__": "guardjit_fuzz_replay"}
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), ns)  # noqa: S102 - a reproducer we wrote
    return replay_main(ns["DATA"])


if __name__ == "__main__":
    sys.exit(replay_file(sys.argv[1]))
