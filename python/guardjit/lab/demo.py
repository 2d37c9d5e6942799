"""The main job: real models compiled with guardjit, checked against Dynamo.

Per model: compile with ``guardjit.compile``, run once, then for every compile
unit time Dynamo's ``RootGuardManager.check`` and guardjit's (the replacement
root, which calls the native function) on the same frame locals dict,
interleaved; then replay a fixed set of mutated inputs and count the answers
that differ from Dynamo's (must be 0).
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
import time
from typing import Any

import torch

import guardjit
from guardjit import _core, models, plugin
from guardjit.lab import timing


@dataclasses.dataclass
class ModelResult:
    name: str
    guards: int
    native_fraction: float
    sets: int
    sets_native: int
    dynamo_check_us: float
    guardjit_check_us: float
    ratio: float
    ratio_min: float
    ratio_max: float
    compile_ms: float
    mutations: int
    mismatches: int
    dynamo_rejects: int  # mutations Dynamo's check rejects (would recompile)
    fallback_reasons: list[str]
    mismatch_details: list[str]


def _frame_locals_for(unit: plugin.Unit, args: tuple) -> dict:
    """The unit's compile-time frame locals with the call's arguments replaced."""
    f_locals = dict(unit.f_locals)
    code = unit.code
    names = list(f_locals)
    if code is not None:
        names = list(code.co_varnames[: code.co_argcount])
    targets = [n for n in names if n != "self"]
    for name, value in zip(targets, args):
        if name in f_locals:
            f_locals[name] = value
    return f_locals


def run_model(case: models.ModelCase, backend: str = "eager", rounds: int = 31,
              opt_level: str = "O0") -> ModelResult:
    torch._dynamo.reset()
    plugin.clear_units()
    plugin.config.keep_units = True
    plugin.config.keep_frame_locals = True
    plugin.config.opt_level = opt_level
    background_ms = _core.tier_up_stats()["compile_ms"]
    try:
        compiled = guardjit.compile(case.model, backend=backend)
        # Default grad mode: the measurements and mutations below run in it.
        compiled(*case.make_input())
        plugin.wait_for_tier_up()  # measure the steady state
        # Interpreter first: LLVM runs on the background thread, at the first
        # tier and again at the tier-up level (GUARDJIT_FIRST_TIER=sync: on
        # Dynamo's thread, counted in Unit.compile_ms).
        background_ms = _core.tier_up_stats()["compile_ms"] - background_ms
        units = plugin.units()
    finally:
        plugin.config.keep_frame_locals = False
        plugin.config.keep_units = False
        plugin.clear_units()

    converted = [u for u in units if u.status != "dynamo" and u.f_locals is not None]
    guards = sum(u.guards for u in units)
    native_guards = sum(u.guards - u.python_guards for u in converted)

    dyn_us = gj_us = 0.0
    ratios: list[timing.ABResult] = []
    for u in converted:
        f_locals = u.f_locals
        # Time the passing path (a hit, as in a serving loop): same global
        # state as at compile time, same frame locals for both.
        if not (u.dynamo_root.check(f_locals) and u.native_root.check(f_locals)):
            raise RuntimeError(f"{case.name}: a check fails on its own compile-time frame locals")
        r = timing.interleaved(lambda: u.dynamo_root.check(f_locals),
                               lambda: u.native_root.check(f_locals), rounds=rounds)
        ratios.append(r)
        dyn_us += r.a_us
        gj_us += r.b_us

    mismatches, rejects, details = 0, 0, []
    n_mut = 0
    for name, mutate in case.mutations.items():
        base_args = case.make_input()
        new_args, undo = mutate(case.model, base_args)
        try:
            for u in converted:
                f_locals = _frame_locals_for(u, new_args)
                expected = u.dynamo_root.check(f_locals)
                got_native = u.native_root.check(f_locals)
                got_interp = u.bound.interpret(f_locals)
                n_mut += 1
                rejects += not expected
                if got_native != expected or got_interp != expected:
                    mismatches += 1
                    details.append(f"{name}: dynamo={expected} native={got_native} "
                                   f"interpreter={got_interp}")
        finally:
            undo()
    single = len(ratios) == 1
    return ModelResult(
        name=case.name, guards=guards,
        native_fraction=(native_guards / guards) if guards else 0.0,
        sets=len(units), sets_native=len(converted),
        dynamo_check_us=dyn_us, guardjit_check_us=gj_us,
        ratio=(ratios[0].ratio if single else (dyn_us / gj_us if gj_us else 0.0)),
        ratio_min=min((r.ratio_min for r in ratios), default=0.0),
        ratio_max=max((r.ratio_max for r in ratios), default=0.0),
        compile_ms=sum(u.compile_ms for u in converted) + background_ms,
        mutations=n_mut, mismatches=mismatches, dynamo_rejects=rejects,
        fallback_reasons=[u.reason for u in units if u.status == "dynamo"],
        mismatch_details=details)


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import os

    from guardjit import _core

    return {"cpu": cpu, "cores": os.cpu_count(), "python": sys.version.split()[0],
            "torch": torch.__version__, "llvm": _core.LLVM_VERSION,
            "platform": platform.platform(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


LEGEND = """
guards       Dynamo's leaf guards in the model's compile units (its tree, as TORCH_LOGS=guards prints it)
native       share of them guardjit checks without calling Python (the rest are Dynamo's Python lambdas)
sets         compile units running guardjit's check / all compile units
dynamo µs    Dynamo's RootGuardManager.check per call; guardjit µs: guardjit's root on the same frame
             locals (the guard check only, not the model); medians of interleaved rounds
ratio        median of per-round dynamo/guardjit ratios (min-max over rounds: wide on a loaded machine)
JIT ms       LLVM compile time of the model's native checks, every tier, off the calling thread
             (interpreter first; a background thread compiles, then recompiles at the tier-up level)
mutations    mutated inputs replayed against every unit; 'rejected': how many Dynamo's own check rejects
mismatches   answers of guardjit (native or interpreter) that differ from Dynamo's: must be 0"""


def format_table(results: list[ModelResult]) -> str:
    head = ("model", "guards", "native", "sets", "dynamo µs", "guardjit µs", "ratio (min-max)",
            "JIT ms", "mutations", "mismatches")
    rows = [head]
    for r in results:
        rows.append((r.name, str(r.guards), f"{r.native_fraction:.1%}", f"{r.sets_native}/{r.sets}",
                     f"{r.dynamo_check_us:.2f}", f"{r.guardjit_check_us:.2f}",
                     f"{r.ratio:.1f}x ({r.ratio_min:.1f}-{r.ratio_max:.1f})",
                     f"{r.compile_ms:.1f}", f"{r.mutations} ({r.dynamo_rejects} rejected)",
                     str(r.mismatches)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def to_json(results: list[ModelResult]) -> dict[str, Any]:
    return {
        "machine": machine(),
        "models": [{
            "name": r.name, "guards": r.guards, "native_fraction": r.native_fraction,
            "dynamo_check_us": r.dynamo_check_us, "guardjit_check_us": r.guardjit_check_us,
            "ratio": r.ratio, "ratio_min": r.ratio_min, "ratio_max": r.ratio_max,
            "compile_ms": r.compile_ms, "mutations": r.mutations, "mismatches": r.mismatches,
            "dynamo_rejects": r.dynamo_rejects, "sets": r.sets, "sets_native": r.sets_native,
            "fallback_reasons": r.fallback_reasons, "mismatch_details": r.mismatch_details,
        } for r in results],
    }


def main(names: list[str], backend: str, json_path: str | None, rounds: int,
         opt_level: str) -> int:
    if not guardjit.enabled():
        print("guardjit cannot run here (see the warning above)", file=sys.stderr)
        return 2
    results = []
    for name in names:
        case = models.DEFAULT_MODELS[name]()
        print(f"[{name}] compiling and measuring ...", file=sys.stderr, flush=True)
        results.append(run_model(case, backend=backend, rounds=rounds, opt_level=opt_level))
    print(format_table(results))
    print(LEGEND)
    for r in results:
        for reason in r.fallback_reasons:
            print(f"  {r.name}: a compile unit stayed on Dynamo's path: {reason}")
        for d in r.mismatch_details:
            print(f"  {r.name}: MISMATCH {d}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(to_json(results), f, indent=2)
        print(f"wrote {json_path}", file=sys.stderr)
    return 1 if any(r.mismatches for r in results) else 0
