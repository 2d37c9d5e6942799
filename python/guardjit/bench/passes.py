"""The pass pipeline's effect on each model's check (the ``"passes"`` key).

Per model, one compile with guardjit (backend ``eager``); for every compile
unit the *recorded* IR (before any pass) is copied and run through:

* ``none``: nothing (the IR as recorded);
* ``default``: the default pipeline (what the plugin runs);
* each of torch's six filters followed by the default pipeline, as the
  plugin runs a filter pass (filters before structural passes).

Each variant is bound, JIT-compiled and checked on the same frame locals;
its time is measured interleaved against ``none`` (MEASURING.md), so
``us`` and ``us_none`` of one row come from the same rounds. Then the
guide's recommended combination (``install_free_tensors`` +
``skip_guard_on_all_nn_modules_unsafe``) is compiled and Dynamo's filtered
tree is timed against guardjit's check of it (``guide``).
"""

from __future__ import annotations

from typing import Any

import torch

from guardjit import _core, plugin
from guardjit.lab import timing

FILTERS = (
    "skip_guard_on_inbuilt_nn_modules_unsafe",
    "skip_guard_on_all_nn_modules_unsafe",
    "keep_tensor_guards_unsafe",
    "keep_portable_guards_unsafe",
    "skip_guard_on_globals_unsafe",
    "skip_all_guards_unsafe",
)
VARIANTS = {"default": "default", **{f: f + ",default" for f in FILTERS}}
GUIDE = "install_free_tensors+skip_guard_on_all_nn_modules_unsafe"


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


def measure_passes(case: Any, s: Any, frames_for: Any) -> dict[str, Any]:
    """The ``"passes"`` entry of one model (see the module docstring).

    ``frames_for(case, units)`` returns, per unit, frame locals its check
    passes on (bench.run recaptures them at entry when the compile-time
    dict went stale).
    """
    from guardjit.bench.run import keep_units, measure_checks

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
        g = measure_checks(
            case, s, {"options": {"guard_filter_fn":
                                  torch.compiler.skip_guard_on_all_nn_modules_unsafe}},
            {"install_free_tensors": True}, cold=False, rounds=s.option_rounds)
        out[GUIDE] = {k: g.get(k) for k in ("guards", "status", "dynamo_check_us",
                                            "guardjit_check_us", "ratio", "fallback_reasons")}
    except Exception as e:  # noqa: BLE001 - recorded, never raised
        out[GUIDE] = {"status": "error", "error": f"{type(e).__name__}: {e}"[:300]}
    out["status"] = "ok"
    return out
