"""``python -m guardjit bench --suite serve``: a Python server of AOTInductor
packages, per request: choose the artifact by guard checks, then run it.

The bundle of ``guardjit.serving.tiny`` (float32 batches 1/4/16, bfloat16
batch 1; :func:`guardjit.serving.build_bundle`) is written first; its
packages are loaded with ``aoti_load_package`` and shared by every side. A
request is one bucket's example (round robin over the buckets), served as a
Python server would: build forward's frame locals, try each artifact's check
in bucket order, run the first artifact that passes. The sides differ only
in the checks:

* ``dynamo_full``: the root guard manager of the cache entry plain
  ``torch.compile(model, dynamic=False, fullgraph=True)`` builds for that
  bucket (what Dynamo's cache lookup runs);
* ``dynamo_portable``: the same with ``guard_filter_fn=
  torch.compiler.keep_portable_guards_unsafe`` (torch's portable set,
  parameters and buffers included);
* ``guardjit_full``: ``guardjit.compile`` of the same: the entry's root runs
  guardjit's native check of the full set (after the tier-up);
* ``guardjit_select``: the bundle's sets from Python, as the C++ host uses
  them: the first select set that passes, then that artifact's full portable
  set (guardjit's native code, bound in this process);
* ``none``: the floor: the request's artifact is known, nothing is checked.

Reported per side (medians over interleaved rounds, MEASURING.md): ns per
request of the selection (frame-locals dict included; ``none`` is that dict
and the index alone), and requests per second of the whole loop (selection
plus the package's run). Every side's choice is checked against the bucket
each request came from before timing, and every package's output against
eager. Hot numbers only: the requests cycle over four example inputs.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

SIDES = ("dynamo_full", "dynamo_portable", "guardjit_full", "guardjit_select", "none")


@dataclasses.dataclass
class Settings:
    rounds: int = 61
    warmup: int = 3
    requests: int = 256  # per timed batch, round robin over the buckets
    batches: tuple = (1, 4, 16)
    bf16_batch: int = 1
    out: str | None = None  # the bundle's directory (default: a temporary one)

    @classmethod
    def quick_mode(cls) -> Settings:
        return cls(rounds=5, warmup=1, requests=16)


def _locals_fn(model: Any, inputs: list[dict]) -> Callable[[list], dict]:
    """Builds forward's frame locals from a request's flat inputs."""
    import re

    names = []
    for spec in inputs:
        m = re.fullmatch(r"L\['(\w+)'\]", spec["source"])
        if not m:
            raise ValueError(f"the serve bench takes top-level tensor inputs, not {spec['source']}")
        names.append(m.group(1))
    if len(names) == 1:
        (n,) = names
        return lambda flat: {"self": model, n: flat[0]}
    return lambda flat: {"self": model, **dict(zip(names, flat))}


def _count_filter(log: list, keep: Callable[[list], list]) -> Callable[[list], list]:
    def f(entries: list) -> list:
        kept = keep(entries)
        log.append({"guards": len(entries), "kept": sum(map(bool, kept))})
        return kept

    return f


def _dynamo_roots(compile_fn: Any, model: Any, examples: list[list], make_locals: Any,
                  options: dict | None) -> list:
    """The root guard manager of each bucket's cache entry, in bucket order."""
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    compiled = compile_fn(model, backend="eager", dynamic=False, fullgraph=True,
                          **({"options": options} if options else {}))
    with torch._dynamo.config.patch(recompile_limit=len(examples) + 8), torch.no_grad():
        for flat in examples:
            compiled(*flat)
    code = type(model).forward.__code__
    roots = [e.guard_manager.root for e in _debug_get_cache_entry_list(code)]
    out = []
    with torch.no_grad():
        for k, flat in enumerate(examples):
            f = make_locals(flat)
            hits = [r for r in roots if r.check(f)]
            if len(hits) != 1:
                raise RuntimeError(f"bucket {k}: {len(hits)} cache entries accept its example")
            out.append(hits[0])
    return out


def _picker(checks: list) -> Callable[[dict], int]:
    def pick(f: dict) -> int:
        for k, c in enumerate(checks):
            if c(f):
                return k
        raise RuntimeError("no artifact accepts the request")

    return pick


def _select_picker(select: list, full: list) -> Callable[[dict], int]:
    def pick(f: dict) -> int:
        for k, s in enumerate(select):
            if s(f):
                if full[k](f):
                    return k
                break
        raise RuntimeError("no artifact accepts the request")

    return pick


def run(settings: Settings | None = None, progress: bool = True) -> dict[str, Any]:
    import guardjit
    from guardjit import _core, plugin, serving
    from guardjit.bench import report
    from torch._inductor import aoti_load_package

    s = settings or Settings()
    start = time.perf_counter()
    say = (lambda m: print(f"bench serve: {m}", flush=True, file=__import__("sys").stderr)) \
        if progress else (lambda m: None)
    case = serving.tiny(s.batches, s.bf16_batch)
    model = case.model
    tmp = None
    out = s.out
    if out is None:
        tmp = tempfile.TemporaryDirectory(prefix="guardjit-serve-bench-")
        out = tmp.name
    try:
        bundle = serving.build_bundle(model, case.buckets, out, name=case.name,
                                      progress=say if progress else False)
        m = bundle.manifest
        names = [a["name"] for a in m["artifacts"]]
        examples = [serving._flat_tensors(*(lambda b: (b.args, b.kwargs))(serving._as_bucket(b)))
                    for b in case.buckets]
        runners = [aoti_load_package(os.path.join(out, a["package"])) for a in m["artifacts"]]
        with torch.no_grad():
            for k, flat in enumerate(examples):
                torch.testing.assert_close(runners[k](*flat), model(*flat))
        make_locals = _locals_fn(model, m["inputs"])

        # The sides' checks, each list in bucket order.
        say("plain torch.compile: full and portable guard sets")
        counts: dict[str, list] = {"dynamo_portable": []}
        torch._dynamo.reset()
        full_roots = _dynamo_roots(torch.compile, model, examples, make_locals, None)
        torch._dynamo.reset()
        portable_roots = _dynamo_roots(
            torch.compile, model, examples, make_locals,
            {"guard_filter_fn": _count_filter(counts["dynamo_portable"],
                                              torch.compiler.keep_portable_guards_unsafe)})
        torch._dynamo.reset()
        say("guardjit.compile: full guard set, native")
        gj_roots = _dynamo_roots(guardjit.compile, model, examples, make_locals, None)
        plugin.wait_for_tier_up(60.0)

        def native(ir: Any) -> Any:
            bound = _core.bind(ir)
            return _core.make_guard(bound, _core.compile(bound, "O1"))

        sel_checks = [native(ir) for ir in bundle.select]
        full_checks = [native(ir) for ir in bundle.sets]
        pickers = {
            "dynamo_full": _picker([r.check for r in full_roots]),
            "dynamo_portable": _picker([r.check for r in portable_roots]),
            "guardjit_full": _picker([r.check for r in gj_roots]),
            "guardjit_select": _select_picker(sel_checks, full_checks),
        }

        requests = [examples[k % len(examples)] for k in range(s.requests)]
        want = [k % len(examples) for k in range(s.requests)]
        with torch.no_grad():
            for side, pick in pickers.items():
                got = [pick(make_locals(r)) for r in requests]
                if got != want:
                    raise RuntimeError(f"{side} routes requests to {got}, expected {want}")

        def check_loop(pick: Callable[[dict], int] | None) -> Callable[[], None]:
            if pick is None:
                def loop() -> None:
                    for r, k in zip(requests, want):
                        make_locals(r)
                        runners[k]  # noqa: B018 - the index, as the others
            else:
                def loop() -> None:
                    for r in requests:
                        pick(make_locals(r))
            return loop

        def serve_loop(pick: Callable[[dict], int] | None) -> Callable[[], None]:
            if pick is None:
                def loop() -> None:
                    for r, k in zip(requests, want):
                        make_locals(r)
                        runners[k](*r)
            else:
                def loop() -> None:
                    for r in requests:
                        runners[pick(make_locals(r))](*r)
            return loop

        loops = {side: (check_loop(pickers.get(side)), serve_loop(pickers.get(side)))
                 for side in SIDES}
        say(f"timing {len(SIDES)} sides, {s.rounds} interleaved rounds of {s.requests} requests")
        check_ns: dict[str, list] = {side: [] for side in SIDES}
        serve_ns: dict[str, list] = {side: [] for side in SIDES}
        pc = time.perf_counter_ns
        with torch.no_grad():
            for rnd in range(s.warmup + s.rounds):
                for side in SIDES:
                    t = pc(); loops[side][0](); dt = pc() - t
                    if rnd >= s.warmup:
                        check_ns[side].append(dt / s.requests)
                for side in SIDES:
                    t = pc(); loops[side][1](); dt = pc() - t
                    if rnd >= s.warmup:
                        serve_ns[side].append(dt / s.requests)

        def ratios(xs: list, ys: list) -> dict:
            r = [x / y for x, y in zip(xs, ys)]
            return {"median": statistics.median(r), "min": min(r), "max": max(r)}

        # Check calls per request: the artifacts are tried in bucket order
        # (request k of bucket b: b + 1 calls); guardjit_select adds the
        # chosen artifact's full set.
        tried = statistics.mean(k + 1 for k in want)
        calls = {"dynamo_full": tried, "dynamo_portable": tried, "guardjit_full": tried,
                 "guardjit_select": tried + 1, "none": 0}
        floor = statistics.median(check_ns["none"])
        sides = {}
        for side in SIDES:
            med = statistics.median(check_ns[side])
            sides[side] = {
                "check_calls_per_request": calls[side],
                # (selection - the floor's dict and index) per check call
                "ns_per_check_call": (med - floor) / calls[side] if calls[side] else None,
                "select_ns_per_request": med,
                "select_ns_min": min(check_ns[side]),
                "select_ns_max": max(check_ns[side]),
                "requests_per_s": 1e9 / statistics.median(serve_ns[side]),
                "serve_ns_per_request": statistics.median(serve_ns[side]),
                "select_ratio_to_dynamo_full": ratios(check_ns[side], check_ns["dynamo_full"]),
                "serve_ratio_to_none": ratios(serve_ns[side], serve_ns["none"]),
            }
        env = report.environment()
        return {
            "suite": "serve",
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "machine": env["machine"],
            "versions": env["versions"],
            "load_average": list(os.getloadavg()),
            "torch_threads": torch.get_num_threads(),
            "settings": dataclasses.asdict(s),
            "artifacts": names,
            "guard_counts": {
                "per_artifact": {a["name"]: {k: v for k, v in a["guard_counts"].items()
                                             if not k.endswith("_by_kind")}
                                 for a in m["artifacts"]},
                # per compile of the dynamo_portable side: Dynamo's guards
                # (the full tree) and those keep_portable_guards_unsafe kept
                "dynamo_keep_portable": counts["dynamo_portable"],
            },
            "sides": sides,
            "export_s": m["export_s"],
            "wall_s": time.perf_counter() - start,
        }
    finally:
        torch._dynamo.reset()
        if tmp is not None:
            tmp.cleanup()


def format_text(data: dict[str, Any]) -> str:
    lines = [f"serve bench ({data['date']}, load {data['load_average'][0]:.2f}, "
             f"{data['settings']['requests']} requests x {data['settings']['rounds']} rounds, "
             f"artifacts {', '.join(data['artifacts'])})",
             f"{'side':<18}{'ns/check':>9}{'select ns/req':>14}{'vs dynamo_full':>16}"
             f"{'req/s':>10}{'vs none':>10}"]
    for side, d in data["sides"].items():
        per = d["ns_per_check_call"]
        lines.append(f"{side:<18}{'-' if per is None else f'{per:.0f}':>9}"
                     f"{d['select_ns_per_request']:>14.0f}"
                     f"{d['select_ratio_to_dynamo_full']['median']:>16.2f}"
                     f"{d['requests_per_s']:>10.0f}{d['serve_ratio_to_none']['median']:>10.2f}")
    c = data["guard_counts"]["per_artifact"]
    first = next(iter(c.values()))
    lines.append(f"guards per artifact: torch full {first['torch_full']}, torch "
                 f"keep_portable {first['torch_keep_portable']}, bundle (inputs only) "
                 f"{first['guardjit_portable']}, select {first['select']}")
    return "\n".join(lines)
