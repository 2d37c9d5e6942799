"""An end-to-end mismatch replayed in fresh processes, one side each.

In the fuzzer's process guardjit's compiled model and plain
``torch.compile`` of the same entry share every code object below the entry
frame: a frame Dynamo compiles on its own (a TorchFunctionMode's
``__torch_function__`` called from a frame Dynamo skipped, a helper after a
graph break) gets cache entries from both sides, and one side's recompile
limit is the other's. So the two do not see the same cache history, and an
in-process comparison of guardjit with plain torch cannot tell a wrong
answer of torch's from one of guardjit's.

:func:`classify` replays the target's end-to-end history (every sample run
on it so far, in order, ending with the mismatch) in two fresh processes:
one with guardjit only (``targets.build(sides="guardjit")``), one with plain
torch only (``sides="plain"``: guardjit's hooks are not installed). Both seed
torch's generator before building, so a generated program's ``nn.Linear`` has
the same weights in both. The mismatch is torch's behaviour when plain torch
alone differs from eager and guardjit alone returns exactly what plain torch
alone returns. It is *unreproduced* when both sides alone agree with eager
(both raising counts): the in-process mismatch came from what the two sides
share there (a step that deleted ``torch.nn`` breaks the harness's own calls
in that process). Both are counted and listed apart; anything else stays a
disagreement.

``python -m guardjit.fuzz.isolate IN.json OUT.pt`` is the child: it runs the
history on one side and saves the last sample's eager and compiled results.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

SEED = 0


@dataclasses.dataclass
class SideResult:
    side: str
    how_ref: str  # "value" | "raise T" | "error: ..." (the child failed)
    ref: Any
    how_out: str
    out: Any

    @property
    def agrees_with_eager(self) -> bool:
        from guardjit.fuzz.e2e import same

        return same(self.how_ref, self.ref, self.how_out, self.out)

    def __repr__(self) -> str:
        return f"{self.side} alone: eager={self.how_ref} compiled={self.how_out}" + (
            "" if self.how_ref.startswith("error") else
            f" ({'equal to' if self.agrees_with_eager else 'differs from'} eager)")


@dataclasses.dataclass
class Isolated:
    guardjit: SideResult
    plain: SideResult

    @property
    def failed(self) -> bool:
        return any(r.how_ref.startswith("error") for r in (self.guardjit, self.plain))

    @property
    def torch_behaviour(self) -> bool:
        """Plain torch alone is wrong, and guardjit alone is wrong exactly as it is."""
        from guardjit.fuzz.e2e import same

        g, p = self.guardjit, self.plain
        return (not self.failed and not p.agrees_with_eager
                and same(g.how_ref, g.ref, p.how_ref, p.ref)
                and g.how_out == p.how_out and same(g.how_out, g.out, p.how_out, p.out))

    @property
    def unreproduced(self) -> bool:
        """In fresh processes both sides agree with eager and with each other
        (both raising counts as agreement): the in-process mismatch came from
        the state the two sides share there (code objects below the entry,
        a mutation that broke the harness itself), not from either check."""
        from guardjit.fuzz.e2e import same

        g, p = self.guardjit, self.plain
        return (not self.failed and g.agrees_with_eager and p.agrees_with_eager
                and same(g.how_out, g.out, p.how_out, p.out))

    @property
    def harness_broken(self) -> bool:
        """Both children failed before any result, with the same error: the
        replayed case breaks the fuzzer's own code, whichever side runs."""
        g, p = self.guardjit, self.plain
        return (g.how_ref.startswith("error: exit") and p.how_ref.startswith("error: exit")
                and g.how_ref.split(":", 2)[-1] == p.how_ref.split(":", 2)[-1])

    def __repr__(self) -> str:
        return f"fresh processes: {self.guardjit!r}; {self.plain!r}"


def run_side(target_key: str, program_source: str | None, history: list[dict],
             side: str) -> SideResult:
    """In this process (a fresh one): builds one side and runs the history."""
    import torch

    from guardjit.fuzz import e2e, targets
    from guardjit.fuzz.mutations import Case

    torch.manual_seed(SEED)
    spec = targets.TargetSpec.parse(target_key)
    target = spec.build(sides=side)
    try:
        if program_source is not None and target.program_source != program_source:
            raise RuntimeError("the generated program's text differs from the saved one")
        last = None
        for d in history:
            c = e2e.calls(target, Case.from_dict(d))
            if c is not None:
                last = c
        if last is None:
            raise RuntimeError("the last sample is not a call of the entry")
        return SideResult(side, last.how_ref, last.ref, last.how_out, last.out)
    finally:
        target.close()


def _child_main(inp: str, outp: str) -> int:
    import logging
    import warnings

    import torch

    warnings.simplefilter("ignore")
    for n in ("torch._dynamo", "torch._subclasses.fake_tensor"):
        logging.getLogger(n).setLevel(logging.CRITICAL)
    torch.set_num_threads(1)
    with open(inp) as f:
        data = json.load(f)
    r = run_side(data["target"], data.get("program_source"), data["history"], data["side"])
    try:
        torch.save({"how_ref": r.how_ref, "ref": r.ref, "how_out": r.how_out, "out": r.out},
                   outp)
    except Exception as e:  # noqa: BLE001 - a result torch.save cannot pickle
        torch.save({"how_ref": r.how_ref, "ref": repr(r.ref), "how_out": r.how_out,
                    "out": repr(r.out), "unpicklable": repr(e)}, outp)
    return 0


def _spawn(target_key: str, program_source: str | None, history: list[dict], side: str,
           timeout_s: float) -> SideResult:
    import torch

    with tempfile.TemporaryDirectory(prefix="guardjit-isolate-") as d:
        inp, outp = os.path.join(d, "in.json"), os.path.join(d, "out.pt")
        with open(inp, "w") as f:
            json.dump({"target": target_key, "program_source": program_source,
                       "history": history, "side": side}, f)
        env = {k: v for k, v in os.environ.items() if k != "GUARDJIT"}
        try:
            p = subprocess.run([sys.executable, "-m", "guardjit.fuzz.isolate", inp, outp],
                               capture_output=True, text=True, timeout=timeout_s, env=env,
                               cwd=d)
        except subprocess.TimeoutExpired:
            return SideResult(side, f"error: timed out after {timeout_s:.0f} s", None, "", None)
        if p.returncode != 0 or not os.path.exists(outp):
            tail = (p.stderr.strip().splitlines() or ["?"])[-1][:200]
            return SideResult(side, f"error: exit {p.returncode}: {tail}", None, "", None)
        r = torch.load(outp, weights_only=False)
        return SideResult(side, r["how_ref"], r["ref"], r["how_out"], r["out"])


def classify(target_key: str, program_source: str | None, history: list[dict],
             timeout_s: float = 600.0) -> Isolated:
    """Runs the history with guardjit alone and with plain torch alone, each
    in a fresh process (one after the other: the machine's cores are shared)."""
    g = _spawn(target_key, program_source, history, "guardjit", timeout_s)
    p = _spawn(target_key, program_source, history, "plain", timeout_s)
    return Isolated(g, p)


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1], sys.argv[2]))
