"""Profile of subtree skipping: the prelude, validation, the residual check and the full check, each alone (docs/performance.md, "Subtree skipping").

Usage: python scripts/skip_profile.py stack-8 stack-64 ...  (bench corpus names)
Writes docs/results/skip-profile.json.
"""
import argparse, json, pathlib, sys, time, statistics
import torch, guardjit
from guardjit import plugin, _core
from guardjit.bench.corpus import CORPUS
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("models", nargs="+", choices=sorted(CORPUS), metavar="MODEL",
                    help="bench corpus names: " + ", ".join(sorted(CORPUS)))
models = parser.parse_args().models
torch.set_num_threads(1)
plugin.config.keep_units = True; plugin.config.keep_frame_locals = True
plugin.config.subtree_skip_cost_model = False  # profile the plans the cost model declines too
out = {}
for name in models:
    torch._dynamo.reset(); plugin.clear_units()
    case = CORPUS[name](False)
    with torch.no_grad():
        m = guardjit.compile(case.model, backend="eager")
        args, kw = case.inputs(); m(*args, **kw); m(*args, **kw)
        plugin.wait_for_tier_up()
        for _ in range(3): m(*args, **kw)
    u = [u for u in plugin.units() if _core.skip_stats(u.check)][0]
    fl = u.f_locals
    with torch.no_grad():  # the units were compiled under no_grad (GLOBAL_STATE)
        assert u.check(fl) and u.check(fl)
        prof = [_core.skip_profile(u.check, fl, 2000) for _ in range(5)]
    assert all(p["passed"] == 2000 and p["validated"] == 2000 and p["prelude_passed"] == 2000
               for p in prof), prof
    st = _core.skip_stats(u.check)
    R = _core.residual_set(u.check)
    out[name] = {"guards": u.guards, "steps": st["steps"], "stable_values": st["stable_values"],
                 "implied_guards": st["implied_guards"], "residual_guards": st["residual_guards"],
                 "prelude_guards": st["prelude_guards"],
                 "full_cost": st["full_cost"], "skip_cost": st["skip_cost"],
                 "prelude_ns": statistics.median(p["prelude_ns"] for p in prof),
                 "validate_ns": statistics.median(p["validate_ns"] for p in prof),
                 "residual_ns": statistics.median(p["residual_ns"] for p in prof),
                 "full_ns": statistics.median(p["full_ns"] for p in prof),
                 "full_over_skip": statistics.median(
                     p["full_ns"] / (p["prelude_ns"] + p["validate_ns"] + p["residual_ns"]) for p in prof),
                 "residual_kinds": R.count_by_kind()}
    print(name, json.dumps(out[name]), flush=True)
RESULT = pathlib.Path(__file__).resolve().parents[1] / "docs" / "results" / "skip-profile.json"
RESULT.write_text(json.dumps(out, indent=1))
