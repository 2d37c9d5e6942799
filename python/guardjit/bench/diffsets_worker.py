"""One scenario of ``--suite diffsets`` in this process, as configured by the environment.

``python -m guardjit.bench.diffsets_worker SCENARIO --out FILE [--quick]``

The parent (:mod:`guardjit.bench.diffsets`) starts one fresh process per
scenario and configuration: plain torch (``GUARDJIT`` unset) or guardjit
(``GUARDJIT=1``, which installs it at start-up, and
``GUARDJIT_DIFFSET_POLICY``). This process:

1. builds the scenario (:mod:`guardjit.bench.scenarios`) with a
   :class:`~guardjit.lab.routing.TaggingBackend` and warms it up: every input
   once, in order (with ``stance_after``, the inputs before it once under
   the stance first);
2. counts, per compile unit (cache entry), the leaf guards of its
   differentiating root (:func:`diff_guards`) and of its full root;
3. checks routing under ``skip_guard_eval_unsafe`` in every order of
   :func:`guardjit.lab.routing.orders` (:func:`guardjit.lab.routing.check_routing`),
   then the same replay without the stance (the oracle against Dynamo's own
   full lookup: it must hold, or the scenario is broken);
4. measures the "TorchDynamo Cache Lookup" µs per call under the stance:
   per input, rounds of repeated calls interleaved across inputs (the
   input's entry is at the front after its first call), median per input,
   mean over inputs; and the same with the inputs in rotation (each call's
   entry is at the back of an LRU cache: the worst order).

Everything it finds goes to FILE as JSON; it raises for nothing (a failed
step is recorded with its error).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from typing import Any

import torch

from guardjit.bench.lookup import profile_lookup_us
from guardjit.lab import routing


def _err(e: BaseException) -> str:
    msg = f"{type(e).__name__}: {e}".strip()
    return msg.splitlines()[0][:300]


def configuration() -> dict[str, Any]:
    """What this process runs: guardjit installed or not, and the policy it took."""
    import torch._dynamo  # noqa: F401  (GUARDJIT=1 installs guardjit when Dynamo loads)

    out: dict[str, Any] = {"GUARDJIT": os.environ.get("GUARDJIT"),
                           "GUARDJIT_DIFFSET_POLICY": os.environ.get("GUARDJIT_DIFFSET_POLICY")}
    gj = sys.modules.get("guardjit.plugin")
    out["guardjit_installed"] = bool(gj is not None and gj.config.route_all)
    # The policy the plugin actually uses (None: this build has no
    # differentiating-set policy and ignores the variable).
    out["policy_effective"] = (getattr(gj.config, "diffset_policy", None)
                               if gj is not None else None)
    return out


def diff_guards(guard_manager: Any) -> tuple[int, str, int | None]:
    """(guards of the entry's differentiating root, how they were counted,
    guards of the unit's full set in the same unit, or None).

    torch, and guardjit builds without their own differentiating sets:
    ``diff_guard_root`` walked like ``recorder.count_tree_guards`` (leaf +
    epilogue guards; None counts 0). guardjit with stance.py: its per-entry
    state ``_guardjit_diff`` (``DiffRoots``): a guardjit unit counts the
    guards of its reduced Guard IR set (``guards_out``; the IR counts a
    DictGuardManager's type and size checks as guards, and the default
    pipeline has de-duplicated the set); an opaque entry (left on Dynamo's
    path) runs its full root, counted as torch's.
    """
    st = guard_manager.__dict__.get("_guardjit_diff")
    if st is not None and st.kind != "opaque":
        return st.guards_out, f"guardjit {st.kind} set (IR guards)", st.guards_in
    n = routing.diff_root_guards(guard_manager)
    return n, ("opaque: full root (leaf guards)" if st is not None
               else "diff_guard_root (leaf guards)"), None


def torch_roots_as_ir(roots: list[Any]) -> tuple[list[int | None], str | None]:
    """Guard IR guards of each of torch's differentiating roots (None: no root).

    The roots are printed as TORCH_LOGS=guards prints a tree and read back by
    ``guard-ir-opt --import=torch-logs -passes=default --stats``: the same
    units and the same pipeline as guardjit's reduced sets, which the issue's
    ``*_guards`` fields (Dynamo's leaf guard objects for torch) do not share:
    the IR counts each code part of a combined epilogue lambda, and a dict
    manager's type and size checks, as guards. Returns (counts, error).
    """
    import re
    import subprocess
    import sysconfig
    import tempfile

    from torch._dynamo.guards import GuardManagerWrapper

    todo = [r for r in roots if r is not None]
    if not todo:
        return [None] * len(roots), None
    tool = os.path.join(sysconfig.get_path("scripts"), "guard-ir-opt")
    with tempfile.NamedTemporaryFile("w", suffix=".log") as f:
        for r in todo:
            f.write(str(GuardManagerWrapper(r)) + "\n")
        f.flush()
        try:
            p = subprocess.run([tool, "--import=torch-logs", "-passes=default", "--stats",
                                "-o", os.devnull, f.name], capture_output=True, text=True,
                               timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            return [None] * len(roots), _err(e)
    counts = [int(n) for n in re.findall(r'^after passes: guard set "[^"]*": (\d+) guards',
                                           p.stderr, re.M)]
    if p.returncode != 0 or len(counts) != len(todo):
        return [None] * len(roots), (p.stderr.strip().splitlines() or ["?"])[-1][:300]
    it = iter(counts)
    return [None if r is None else next(it) for r in roots], None


def _units(codes: list[Any]) -> list[dict[str, Any]]:
    out = []
    for code in codes:
        for e in routing.entries(code):
            gm = e.guard_manager
            n, how, full_ir = diff_guards(gm)
            dr = getattr(gm, "diff_guard_root", None)
            out.append({"id": routing.entry_id(e), "code": code.co_name, "diff_guards": n,
                        "counted_from": how, "full_ir_guards": full_ir,
                        "has_diff_root": dr is not None,
                        "full_guards": routing.count_guards(routing.full_root(gm)),
                        "guardjit_root": type(gm).__name__ == "GuardJitManagerWrapper"})
            st = gm.__dict__.get("_guardjit_diff")
            if st is not None:
                # stance.py's view: reduced/full/empty/opaque, and the pass's
                # stats of the unit (exact or the greedy answer past its budget)
                out[-1]["guardjit_kind"] = st.kind
                out[-1]["pass_stats"] = dict(getattr(st, "pass_stats", {}) or {})
    return out


def measure_lookup(inputs: list[routing.Input], rounds: int, calls: int) -> dict[str, Any]:
    """Lookup µs per call under the stance: per input (repeated), and rotating."""
    stance = torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)
    usable, failed = [], []
    with stance:
        for inp in inputs:
            try:
                if inp.setup is not None:
                    inp.setup()
                inp.compiled()
                usable.append(inp)
            except Exception as e:  # noqa: BLE001 - a miss under the stance
                failed.append({"input": inp.name, "error": _err(e)})
        per: dict[str, list[float]] = {i.name: [] for i in usable}

        def repeated(inp: routing.Input) -> Any:
            if inp.setup is not None:
                inp.setup()
            return profile_lookup_us(inp.compiled, calls)

        for inp in usable:
            repeated(inp)  # warm-up (profiler start-up)
        for _ in range(rounds):
            for inp in usable:
                per[inp.name].append(repeated(inp))
        rot: list[float] = []
        if len(usable) > 1:
            def rotate() -> None:
                for inp in usable:
                    if inp.setup is not None:
                        inp.setup()
                    inp.compiled()
            n = max(1, calls // len(usable))
            for _ in range(rounds):
                rot.append(profile_lookup_us(rotate, n) / len(usable))
    med = {k: statistics.median(v) for k, v in per.items()}
    return {"lookup_us": statistics.fmean(med.values()) if med else None,
            "lookup_us_per_input": med,
            "lookup_us_rotating": statistics.median(rot) if rot else None,
            "lookup_failed": failed, "rounds": rounds, "calls": calls}


def _stance_calls(inputs: list[routing.Input]) -> list[str]:
    """Calls each input once under the stance (errors, not raised)."""
    errors = []
    with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
        for inp in inputs:
            try:
                if inp.setup is not None:
                    inp.setup()
                inp.compiled()
            except Exception as e:  # noqa: BLE001 - recorded
                errors.append(f"{inp.name}: {_err(e)}")
    return errors


def run(name: str, quick: bool) -> dict[str, Any]:
    from guardjit.bench.scenarios import SCENARIOS

    out: dict[str, Any] = {"scenario": name, "configuration": configuration()}
    start = time.perf_counter()
    torch.set_num_threads(1)
    tag = routing.TaggingBackend()
    sc = SCENARIOS[name](tag, quick)
    out["description"] = sc.description
    out["lru"] = sc.lru
    torch._dynamo.config.patch(**sc.dynamo_config).__enter__()  # this process only
    if not sc.lru:
        torch._C._dynamo.eval_frame._set_lru_cache(False)
    torch.set_grad_enabled(sc.grad)
    try:
        for k, inp in enumerate(sc.inputs):  # the warm-up
            if k == sc.stance_after:
                out["warmup_stance_errors"] = _stance_calls(sc.inputs[:k])
            if inp.setup is not None:
                inp.setup()
            inp.compiled()
        codes = list(dict.fromkeys(c for c in tag.codes.values() if c is not None))
        code = sc.code if sc.code is not None else (codes[0] if codes else None)
        if code is not None and code not in codes:
            codes.insert(0, code)
        out["codes"] = [c.co_name for c in codes]
        out["compiles"] = len(tag.compiled)
        units = _units(codes)
        if not out["configuration"]["guardjit_installed"]:
            roots = [getattr(e.guard_manager, "diff_guard_root", None)
                     for c in codes for e in routing.entries(c)]
            ir, err = torch_roots_as_ir(roots)
            for u, n in zip(units, ir):
                u["diff_ir_guards"] = 0 if u["diff_guards"] == 0 and n is None else n
            out["diff_ir_guards"] = (None if err else
                                     sum(u["diff_ir_guards"] or 0 for u in units))
            if err:
                out["diff_ir_error"] = err
        out["units"] = len(units)
        out["unit_records"] = units
        out["diff_guards"] = sum(u["diff_guards"] for u in units)
        out["full_guards"] = sum(u["full_guards"] for u in units)
        for inp in sc.inputs:
            inp.prepare(code)
        orders = routing.orders(len(sc.inputs), count=4 if quick else 12)
        if quick:
            orders = orders[:6]
        rep = routing.check_routing(code, sc.inputs, tag, orders)
        out["routing"] = rep.as_dict()
        out["routed_ok"] = rep.ok
        rounds, calls = (2, 10) if quick else (7, 40)
        out.update(measure_lookup(sc.inputs, rounds, calls))
        oracle = routing.check_routing(code, sc.inputs, tag, orders, stance=False)
        out["oracle"] = oracle.as_dict(max_misroutes=3)
    except Exception as e:  # noqa: BLE001 - recorded, never raised
        out["error"] = _err(e)
        out["traceback"] = traceback.format_exc()[-3000:]
        out.setdefault("routed_ok", False)
    if "guardjit.plugin" in sys.modules:
        import guardjit

        st = guardjit.stats()
        out["guardjit_stats"] = {k: st.get(k) for k in (
            "units_seen", "units_native", "units_interpreter", "units_dynamo",
            "fallback_reasons") if k in st}
        out["guardjit_stats"].update({k: v for k, v in st.items() if "diff" in k})
    out["wall_s"] = time.perf_counter() - start
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m guardjit.bench.diffsets_worker")
    p.add_argument("scenario")
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    data = run(args.scenario, args.quick)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
