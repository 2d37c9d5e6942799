"""The pass pipeline's effect on each model's check (the ``"passes"`` key).

Per model, one compile with guardjit (backend ``eager``); for every compile
unit the *recorded* IR (before any pass) is copied and run through:

* ``none``: nothing (the IR as recorded);
* ``default``: the default pipeline (what the plugin runs);
* each of torch's six filters followed by the default pipeline, as the
  plugin runs a filter pass (filters before structural passes).

Each variant is bound, JIT-compiled and checked on the same frame locals;
its time is measured interleaved against ``none`` (docs/performance.md, "How it is measured"), so
``us`` and ``us_none`` of one row come from the same rounds. Then the
guide's recommended combination (``install_free_tensors`` +
``skip_guard_on_all_nn_modules_unsafe``, :data:`~guardjit.bench.options.UNSAFE`)
is compiled and Dynamo's filtered tree is timed against guardjit's check of
it (the ``UNSAFE`` key).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from guardjit import _core, plugin
from guardjit.bench.capture import keep_units
from guardjit.bench.options import FILTERS, UNSAFE
from guardjit.lab import timing

VARIANTS = {"default": "default", **{f: f + ",default" for f in FILTERS}}


def _variant(units: list, pipeline: str, opt_level: str) -> tuple[list, dict]:
    """(checks, counts) of every unit's recorded IR after ``pipeline``."""
    checks, guards, values = [], 0, 0
    for u in units:
        ir = u.recorded_ir.copy()
        if pipeline:
            _core.run_pipeline(ir, pipeline)
        bound = _core.bind(ir)
        checks.append(_core.make_guard(bound, _core.compile(bound, opt_level)))
        guards += ir.num_guards
        values += ir.num_values
    return checks, {"guards": guards, "values": values}


def _runner(checks: list, frames: list) -> Any:
    pairs = list(zip(checks, frames))
    if len(pairs) == 1:
        c, fl = pairs[0]
        return lambda: c(fl)

    def run() -> None:
        for c, fl in pairs:
            c(fl)
    return run


def measure_passes(case: Any, s: Any, frames_for: Any,
                   guide: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The ``"passes"`` entry of one model (see the module docstring).

    ``frames_for(case, units)`` returns, per unit, frame locals its check
    passes on (bench.run recaptures them at entry when the compile-time
    dict went stale). ``guide()`` measures the check under ``UNSAFE``
    (bench.run's ``measure_checks``; given by the caller, which imports
    this module).
    """
    torch._dynamo.reset()
    out: dict[str, Any] = {}
    saved = plugin.config.pipeline, plugin.config.keep_frame_locals
    plugin.config.keep_frame_locals = True
    try:
        with keep_units():
            compiled = __import__("guardjit").compile(case.model, backend="eager")
            args, kwargs = case.inputs()
            compiled(*args, **kwargs)
            units = [u for u in plugin.units() if u.recorded_ir is not None]
        if not units:
            return {"status": "no native unit"}
        frames = frames_for(case, units)
        base_checks, base_counts = _variant(units, "", s.opt_level)
        base = _runner(base_checks, frames)
        out["none"] = dict(base_counts, passes=all(c(f) for c, f in zip(base_checks, frames)))
        for name, pipeline in VARIANTS.items():
            checks, counts = _variant(units, pipeline, s.opt_level)
            row: dict[str, Any] = dict(counts, pipeline=pipeline,
                                       passes=all(c(f) for c, f in zip(checks, frames)))
            r = timing.interleaved(base, _runner(checks, frames), rounds=s.option_rounds,
                                   target_ms=s.target_ms)
            row.update({"us": r.b_us, "us_none": r.a_us, "speedup": r.ratio,
                        "speedup_min": r.ratio_min, "speedup_max": r.ratio_max})
            out[name] = row
        out["none"]["us"] = out["default"]["us_none"]
    finally:
        plugin.config.pipeline, plugin.config.keep_frame_locals = saved
    try:
        g = guide()
        out[UNSAFE] = {k: g.get(k) for k in ("guards", "status", "dynamo_check_us",
                                             "guardjit_check_us", "ratio", "fallback_reasons")}
    except Exception as e:  # noqa: BLE001 - recorded, never raised
        out[UNSAFE] = {"status": "error", "error": f"{type(e).__name__}: {e}"[:300]}
    out["status"] = "ok"
    return out
