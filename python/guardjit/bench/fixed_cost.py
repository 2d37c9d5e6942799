"""The constant part of one cache lookup: ``python -m guardjit.bench.fixed_cost``.

Three guard sets on ``f(x) = x * 2`` (one tensor argument), each compiled by
``torch.compile`` and by ``guardjit.compile`` side by side (each side its own
cache entry, bench.run.SideBackend):

* ``empty``: ``guard_filter_fn=skip_all_guards_unsafe``, no guard at all;
* ``one``: ``keep_tensor_guards_unsafe``, only ``TENSOR_MATCH`` on ``L['x']``
  (with its DIMENSION_DYNAMIC_MARKING leaf);
* ``default``: torch 2.13's default set for this function (the tensor, the
  ambient GLOBAL_STATE / TORCH_FUNCTION_MODE_STACK / DEFAULT_DEVICE guards and
  the saved-tensors-hooks lambda).

Per set, interleaved as docs/performance.md ("How it is measured") says: the "TorchDynamo Cache
Lookup" profiler event per call (the real frame path: Dynamo's root preamble,
``FrameLocalsMapping``, and for a root LAMBDA_GUARD ``to_dict()`` and the
call), each root's ``check`` on a dict from Python (no ``to_dict``), and
guardjit's check callable alone. Prints a table and writes JSON with
``--json``. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import torch

import guardjit
from guardjit import plugin
from guardjit.bench.capture import capture_units, keep_units
from guardjit.bench.run import SideBackend, _ratio_stats, interleaved_lookups
from guardjit.lab import timing

CASES = {
    "empty": "skip_all_guards_unsafe",
    "one": "keep_tensor_guards_unsafe",
    "default": None,
}


def _f(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _kwargs(filter_name: str | None) -> dict:
    if filter_name is None:
        return {}
    return {"options": {"guard_filter_fn": getattr(torch.compiler, filter_name)}}


def measure(name: str, rounds: int, calls: int) -> dict[str, Any]:
    torch._dynamo.reset()
    x = torch.ones(4)
    fresh = type(_f)(_f.__code__, _f.__globals__, f"f_{name}")
    # A fresh options dict per compile: torch.compile pops guard_filter_fn.
    plain = torch.compile(fresh, backend=SideBackend("eager", "torch"), **_kwargs(CASES[name]))
    with keep_units(), capture_units() as cap_torch:
        plain(x)
    with keep_units(), capture_units() as cap_gj:
        gj = guardjit.compile(fresh, backend=SideBackend("eager", "guardjit"),
                              **_kwargs(CASES[name]))
        gj(x)
        plugin.wait_for_tier_up()
        units = plugin.units()
    (ct,), (cg,) = cap_torch, cap_gj
    out: dict[str, Any] = {
        "filter": CASES[name],
        "guards": sum(u.guards for u in units),
        "guardjit_status": [u.status for u in units],
        "guardjit_root_is_dynamos": cg.final_root is cg.dynamo_root,
    }
    per = interleaved_lookups([lambda: plain(x), lambda: gj(x)], rounds, calls)
    lk = _ratio_stats(per[0], per[1])
    out.update({"lookup_us_torch": lk["a_us"], "lookup_us_guardjit": lk["b_us"],
                "lookup_ratio": lk["ratio"], "lookup_ratio_min": lk["ratio_min"],
                "lookup_ratio_max": lk["ratio_max"]})
    fl_t, fl_g = ct.f_locals, cg.f_locals
    r = timing.interleaved(lambda: ct.dynamo_root.check(fl_t), lambda: cg.final_root.check(fl_g),
                           rounds=rounds * 3, target_ms=2.0)
    out.update({"check_us_torch": r.a_us, "check_us_guardjit": r.b_us, "check_ratio": r.ratio})
    if units and units[0].check is not None:
        fn = units[0].check
        r2 = timing.interleaved(lambda: cg.final_root.check(fl_g), lambda: fn(fl_g),
                                rounds=rounds * 3, target_ms=2.0)
        out.update({"guardjit_fn_us": r2.b_us, "guardjit_root_over_fn_us": r2.a_us - r2.b_us})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m guardjit.bench.fixed_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=200, help="profiled calls per lookup round")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    res = {"load": os.getloadavg(), "cases": {}}
    with torch.no_grad():
        for name in CASES:
            res["cases"][name] = measure(name, args.rounds, args.calls)
    head = ("set", "guards", "lookup µs torch", "lookup µs guardjit", "ratio",
            "check µs torch", "check µs guardjit", "native fn µs", "guardjit root")
    print(" | ".join(head))
    for name, r in res["cases"].items():
        print(" | ".join([name, str(r["guards"]), f"{r['lookup_us_torch']:.2f}",
                          f"{r['lookup_us_guardjit']:.2f}", f"{r['lookup_ratio']:.2f}",
                          f"{r['check_us_torch']:.3f}", f"{r['check_us_guardjit']:.3f}",
                          f"{r.get('guardjit_fn_us', float('nan')):.3f}",
                          "Dynamo's (empty)" if r["guardjit_root_is_dynamos"] else "lambda"]))
    print(f"load average {res['load']}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
