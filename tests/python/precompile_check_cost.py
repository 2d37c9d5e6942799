"""Check cost of a precompiled module's guards: torch's vs guardjit's.

    PYTHONPATH=python python tests/python/precompile_check_cost.py [--rounds N] [--json PATH]

One process (MEASURING.md): the same small module is precompiled twice with
``OptimizedModule._aot_compile`` (backend "eager"), once by plain torch and
once with guardjit installed; a third copy is saved and loaded with guardjit
installed (converted at its first check). Per round, A and B alternate, each
timing a batch of calls on the same frame-locals dict (``wrapper.check``), the
same arguments (``AOTCompiledFunction.guard_check``, which builds the dict each
call) and the whole call (``AOTCompiledModel.__call__``). Reported: medians of
the per-round ns per call and of the per-round ratios, with min-max, after
warm-up rounds and guardjit's background tier-up.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch
from torch._C._dynamo.guards import RootGuardManager
from torch._dynamo.aot_compile import ModelInput

import guardjit
from guardjit import plugin, recorder


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin1 = torch.nn.Linear(8, 16)
        self.lin2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.lin2(torch.relu(self.lin1(x)))


def _compiled(net, example, install):
    opt = torch.compile(net, fullgraph=True, backend="eager")
    if install:
        guardjit.install()
    try:
        opt._aot_compile([ModelInput((example,), {}, [])])
    finally:
        if install:
            guardjit.uninstall()
    return opt


def _time(fn, batch):
    start = time.perf_counter_ns()
    for _ in range(batch):
        fn()
    return (time.perf_counter_ns() - start) / batch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=2000)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    torch.manual_seed(0)
    net = Net()
    x = torch.randn(4, 8)
    plain = _compiled(net, x, install=False)
    gj = _compiled(net, x, install=True)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "net.bin")
        plain._save_aot_compiled_module(path)
        loaded = torch.compile(net, fullgraph=True, backend="eager")
        guardjit.install()
        try:
            with open(path, "rb") as fh:
                loaded._load_aot_compiled_module(fh.read())
        finally:
            guardjit.uninstall()
    sides = {"torch": plain, "guardjit": gj, "guardjit-loaded": loaded}
    for opt in sides.values():
        opt(x)  # the loaded one converts here
    assert plugin.wait_for_tier_up(120)
    results = {name: opt.forward.compiled_results[0] for name, opt in sides.items()}
    assert type(results["torch"]._artifacts.guard_manager).__name__ == "GuardManagerWrapper"
    for name in ("guardjit", "guardjit-loaded"):
        assert isinstance(results[name]._artifacts.guard_manager, plugin.GuardJitManagerWrapper)

    f_locals = results["torch"].prepare_f_locals(net, x)
    # What a C++ entry of torch._dynamo.package calls: the root. Dynamo's
    # tree, guardjit's root (one lambda guard: the native check) and the
    # trampoline root a loaded package unit keeps (its class's __call__ is
    # the native check now).
    loaded_wrapper = results["guardjit-loaded"]._artifacts.guard_manager
    trampoline_root = RootGuardManager()
    trampoline_root.add_lambda_guard(loaded_wrapper.__dict__["_guardjit_trampoline"](),
                                     ["trampoline"], None)
    roots = {"torch": results["torch"]._artifacts.guard_manager.root,
             "guardjit": loaded_wrapper.root, "guardjit-loaded": trampoline_root}
    kinds = {
        "root.check(f_locals): C++ entry's view (guardjit-loaded: trampoline root)":
            lambda r, o, name: (lambda root=roots[name]: root.check(f_locals)),
        "wrapper.check(f_locals)":
            lambda r, o, name: (lambda: r._artifacts.guard_manager.check(f_locals)),
        "guard_check(model, x)": lambda r, o, name: (lambda: r.guard_check(net, x)),
        "whole call opt(x)": lambda r, o, name: (lambda: o(x)),
    }
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "torch": torch.__version__, "python": sys.version.split()[0],
           "load_note": "shared 2-core machine, other engineers' builds running",
           "rounds": args.rounds, "batch": args.batch, "results": {}}
    for kind, make in kinds.items():
        fns = {name: make(results[name], sides[name], name) for name in sides}
        per = {name: [] for name in sides}
        for rnd in range(args.warmup + args.rounds):
            for name, fn in fns.items():
                ns = _time(fn, args.batch)
                if rnd >= args.warmup:
                    per[name].append(ns)
        entry = {name: {"median_ns": statistics.median(v), "min_ns": min(v), "max_ns": max(v)}
                 for name, v in per.items()}
        for name in ("guardjit", "guardjit-loaded"):
            ratios = [t / g for t, g in zip(per["torch"], per[name])]
            entry[f"torch/{name}"] = {"median": statistics.median(ratios),
                                      "min": min(ratios), "max": max(ratios)}
        out["results"][kind] = entry
        print(kind, json.dumps(entry, indent=None))
    tree = recorder.count_tree_guards(results["torch"]._artifacts.guard_manager.root)
    out["dynamo_leaf_guards"] = dict(tree)
    out["guardjit_stats_precompile"] = guardjit.stats()["precompile"]
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
