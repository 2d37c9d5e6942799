"""Which step of a case left the program state changed (a state leak).

The driver checks after every case that Dynamo still passes each unit's
compile-time frame locals (:func:`oracle.base_ok`). When it does not, the
case's steps were not all undone. The leaked state cannot be undone in the
fuzzer's process, and replaying the step there often shows nothing (a leak
that repeats itself changes nothing the second time), so :func:`find_step`
replays the case in a fresh process: it builds the target, then applies and
undoes each step alone (as the check-level case did, and through the
end-to-end sample when the case ran one) and checks the units after each; the
first step after which a unit fails is the one responsible. If no step leaks
alone, the case's steps together are tried.

``python -m guardjit.fuzz.leaks IN.json`` is the child; it prints one JSON
line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile


@dataclasses.dataclass
class Leak:
    step: str | None  # the step not restored; None when the replay did not leak
    units: list[str]  # the units that fail on their compile-time frame locals
    undo_errors: list[str]
    note: str = ""

    def __str__(self) -> str:
        if self.step is None:
            return f"no step leaks from a fresh build ({self.note})"
        return (f"step responsible: {self.step} (units {', '.join(self.units)} then fail"
                + (f"; undo errors: {'; '.join(self.undo_errors)[:300]}" if self.undo_errors
                   else "") + ")")


def replay(target_key: str, program_source: str | None, case_dict: dict,
           with_e2e: bool) -> Leak:
    """In this process (a fresh one): the first step of the case that leaks."""
    from guardjit.fuzz import e2e, oracle, targets
    from guardjit.fuzz.mutations import Case

    target = targets.TargetSpec.parse(target_key).build()
    try:
        if program_source is not None and target.program_source != program_source:
            return Leak(None, [], [], "the generated program's text differs from the saved one")
        bad = oracle.base_ok(target)
        if bad:
            return Leak(None, bad, [], "the fresh build already fails")
        case = Case.from_dict(case_dict)
        trials = [Case(case.unit, [s]) for s in case.steps]
        if len(case.steps) > 1:
            trials.append(case)
        for trial in trials:
            v = oracle.run_case(target, trial)
            if with_e2e:
                e2e.calls(target, trial)
            bad = oracle.base_ok(target)
            if bad:
                step = (str(trial.steps[0]) if len(trial.steps) == 1
                        else "the steps together: " + "; ".join(map(str, trial.steps)))
                return Leak(step, bad, v.undo_errors)
        return Leak(None, [], [], "the leak needs an earlier case's change")
    finally:
        target.close()


def find_step(target_key: str, program_source: str | None, case_dict: dict,
              with_e2e: bool, timeout_s: float = 600.0) -> Leak:
    """Runs :func:`replay` in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="guardjit-leak-") as d:
        inp = os.path.join(d, "in.json")
        with open(inp, "w") as f:
            json.dump({"target": target_key, "program_source": program_source,
                       "case": case_dict, "e2e": with_e2e}, f)
        env = {k: v for k, v in os.environ.items() if k != "GUARDJIT"}
        try:
            p = subprocess.run([sys.executable, "-m", "guardjit.fuzz.leaks", inp],
                               capture_output=True, text=True, timeout=timeout_s, env=env, cwd=d)
        except subprocess.TimeoutExpired:
            return Leak(None, [], [], f"the replay timed out after {timeout_s:.0f} s")
        lines = p.stdout.strip().splitlines()
        if p.returncode != 0 or not lines:
            tail = (p.stderr.strip().splitlines() or ["?"])[-1][:200]
            return Leak(None, [], [], f"the replay failed: exit {p.returncode}: {tail}")
        return Leak(**json.loads(lines[-1]))


def _child_main(inp: str) -> int:
    import logging
    import warnings

    import torch

    warnings.simplefilter("ignore")
    for n in ("torch._dynamo", "torch._subclasses.fake_tensor"):
        logging.getLogger(n).setLevel(logging.CRITICAL)
    torch.set_num_threads(1)  # as the driver runs
    with open(inp) as f:
        data = json.load(f)
    leak = replay(data["target"], data.get("program_source"), data["case"], data["e2e"])
    print(json.dumps(dataclasses.asdict(leak)))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1]))
