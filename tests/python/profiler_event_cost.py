"""Cost of guardjit's torch.profiler event (python/src/NativeGuard.cpp).

    PYTHONPATH=python python tests/python/profiler_event_cost.py [small|deep] [CALLS]

One process, one unit (MEASURING.md): per round, `_core.time_guard_calls`
times a C++ loop of CALLS calls of the unit's check on the same frame-locals
dict, in turn: `before` (the bare check, as the callable ran it before the
event existed), `after` (the callable's path: torch's test for a profiler,
none running), `off` (the path with `_core.set_profiler_events(False)`) and
`profiled` (under `torch.profiler`, 2,000 calls). Reported: median ns per call
of each, and median and min-max of the per-round `after - before` and
`after / before`, after 5 warm-up rounds and the native tier-up.
"""
import json
import statistics
import sys

import torch

import guardjit
from guardjit import _core, plugin

plugin.config.keep_units = True
plugin.config.keep_frame_locals = True
which = sys.argv[1] if len(sys.argv) > 1 else "small"
torch.manual_seed(0)
if which == "small":
    m = torch.nn.Linear(8, 8)
else:
    m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
                              for _ in range(12)])
x = torch.randn(2, 8)
opt = guardjit.compile(m, backend="eager")
with torch.no_grad():
    opt(x)
    plugin.wait_for_tier_up()
    opt(x)
[u] = [u for u in plugin.units() if u.status != "dynamo"]
fl, check = u.f_locals, u.check
N, ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 200000, 101
res = {"before": [], "after": [], "off": [], "profiled": []}
for r in range(ROUNDS + 5):
    a = _core.time_guard_calls(check, fl, N, recorded=False)
    b = _core.time_guard_calls(check, fl, N, recorded=True)
    _core.set_profiler_events(False)
    o = _core.time_guard_calls(check, fl, N, recorded=True)
    _core.set_profiler_events(True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        c = _core.time_guard_calls(check, fl, 2000, recorded=True)
    if r >= 5:
        for k, v in zip(res, (a, b, o, c)):
            res[k].append(v)
diff = [b - a for a, b in zip(res["before"], res["after"])]
ratio = [b / a for a, b in zip(res["before"], res["after"])]
print(json.dumps({
    "unit_guards": u.guards, "level": _core.guard_level(check),
    "subtree_skip": _core.skip_stats(check) is not None, "calls_per_round": N, "rounds": ROUNDS,
    "median_ns": {k: round(statistics.median(v), 2) for k, v in res.items()},
    "after_minus_before_ns": {"median": round(statistics.median(diff), 2),
                              "min": round(min(diff), 2), "max": round(max(diff), 2)},
    "after_over_before": {"median": round(statistics.median(ratio), 3),
                          "min": round(min(ratio), 3), "max": round(max(ratio), 3)},
    "torch": torch.__version__}, indent=1))
