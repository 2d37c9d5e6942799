"""The oracle under ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``:
the routing rule, not Dynamo's answer.

Under the stance only each entry's differentiating root runs, so an entry
may pass inputs its full guards reject; the contract is about *warmed*
inputs only: each is served by the entry a full-guard lookup would pick in
the same cache order (``guardjit/lab/routing.py``). A :class:`StanceTarget` is a
generated program (or a corpus model) compiled with guardjit and a tagging
backend, warmed up with the base input and 1-4 *variants* drawn at random:
a tensor argument in another dtype, one size larger, with
``requires_grad``, an argument set to ``None`` or from ``None`` to a
tensor, two tensor arguments aliased, a bool flipped, an int changed, a
module attribute, a global, grad mode or train mode changed. Each variant is
a :class:`guardjit.lab.routing.Input` whose ``setup`` sets the whole state it
stands for (every state key, to its value or the default).

A stance case (:func:`run_case`) draws a cache order (calling the variants
in reverse order under the stance: each hit moves its entry to the front)
and a probe variant, and judges every call of it: before the call the
entries' full Dynamo trees (clones, :class:`routing.OracleRoots`) pick the
expected entry front first; the call must run exactly that entry's graph and
return eager's result. The policy (``torch-compatible``, ``minimal``,
``guarded-minimal``) is the target's option.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import torch

import guardjit
from guardjit import plugin
from guardjit.lab import routing

POLICIES = ("torch-compatible", "minimal", "guarded-minimal")


@dataclasses.dataclass
class StanceTarget:
    key: str
    code: Any
    tag: routing.TaggingBackend
    inputs: list[routing.Input]
    restore: Callable[[], None]
    variants: list[str]

    def close(self) -> None:
        self.restore()
        torch._dynamo.reset()


def _arg_variants(args: tuple, rng: random.Random) -> list[tuple[str, tuple]]:
    out = []
    tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    if tensors:
        i = tensors[0]
        t = args[i]
        rep = lambda v: args[:i] + (v,) + args[i + 1:]  # noqa: E731
        if t.is_floating_point():
            out.append(("dtype float64" if t.dtype != torch.float64 else "dtype float32",
                        rep(t.double() if t.dtype != torch.float64 else t.float())))
            out.append(("requires_grad", rep(t.detach().clone().requires_grad_(True))))
        if t.dim() > 0:
            out.append(("size+1", rep(torch.cat([t, t[:1]], 0))))
    if len(tensors) >= 2:
        a, b = tensors[:2]
        x, y = args[a], args[b]
        if x is y:
            out.append(("unaliased", args[:b] + (y.clone(),) + args[b + 1:]))
        elif x.shape == y.shape and x.dtype == y.dtype:
            out.append(("aliased", args[:b] + (x,) + args[b + 1:]))
    for i, a in enumerate(args):
        if isinstance(a, bool):
            out.append((f"arg{i}={not a}", args[:i] + (not a,) + args[i + 1:]))
        elif isinstance(a, int):
            out.append((f"arg{i}={a + 1}", args[:i] + (a + 1,) + args[i + 1:]))
        elif a is None and tensors:
            out.append((f"arg{i}=tensor", args[:i] + (torch.ones_like(args[tensors[0]]),)
                        + args[i + 1:]))
    if len(tensors) >= 2 and rng.random() < 0.5:
        i = tensors[-1]
        out.append((f"arg{i}=None", args[:i] + (None,) + args[i + 1:]))
    return out


def build(kind: str, name: str, policy: str, seed: int) -> StanceTarget:
    """Compiles and warms up a target under ``policy``; ``seed`` draws the variants."""
    torch._dynamo.reset()
    rng = random.Random(f"stance:{kind}:{name}:{policy}:{seed}")
    if kind == "program":
        from guardjit.fuzz import programs

        mod = programs.generate(int(name)).load()
        entry, args, glb = mod.ENTRY, mod.ARGS(), mod.__dict__
    else:
        from guardjit.bench.corpus import CORPUS

        case = CORPUS[name](True)
        entry, args, glb = case.model, case.make_input(), None
    state: dict[str, tuple[Callable[[Any], None], Any]] = {}  # key -> (setter, default)
    state["grad"] = (torch.set_grad_enabled, torch.is_grad_enabled())
    if isinstance(entry, torch.nn.Module):
        state["train"] = (lambda v: entry.train(v), entry.training)
        floats = [k for k, v in vars(entry).items() if isinstance(v, float) and not k.startswith("_")]
        for k in floats[:1]:
            state[f"attr {k}"] = (lambda v, k=k: setattr(entry, k, v), getattr(entry, k))
    if glb is not None and isinstance(glb.get("SCALE"), float):
        state["global SCALE"] = (lambda v: glb.__setitem__("SCALE", v), glb["SCALE"])

    candidates: list[tuple[str, tuple, dict]] = [(n, a, {}) for n, a in _arg_variants(args, rng)]
    for k, (_, default) in state.items():
        new = (not default) if isinstance(default, bool) else default * 2 + 1
        candidates.append((f"{k}={new}", args, {k: new}))
    rng.shuffle(candidates)
    chosen = [("base", args, {})] + candidates[:rng.randint(1, 4)]

    def setter(values: dict) -> Callable[[], None]:
        def setup() -> None:
            for k, (fn, default) in state.items():
                fn(values.get(k, default))
        return setup

    fn = entry.forward if isinstance(entry, torch.nn.Module) else entry
    code = getattr(fn, "__func__", fn).__code__
    old_policy = plugin.config.diffset_policy
    plugin.config.diffset_policy = policy
    tag = routing.TaggingBackend()
    compiled = guardjit.compile(entry, backend=tag)
    inputs = []
    for label, a, values in chosen:
        inputs.append(routing.Input(label, (lambda a=a: compiled(*a)), (lambda a=a: entry(*a)),
                                    setter(values)))
    kept = []
    try:
        for inp in inputs:  # variants eager cannot run are dropped
            try:
                inp.prepare(code)
            except Exception:  # noqa: BLE001
                continue
            kept.append(inp)
        for inp in kept:  # the warm-up: one compile (or hit) each
            inp.setup()
            inp.compiled()
    finally:
        setter({})()
    inputs = kept

    def restore() -> None:
        setter({})()
        plugin.config.diffset_policy = old_policy
    return StanceTarget(f"{kind}:{name}:{policy}", code, tag, inputs, restore,
                        [i.name for i in inputs])


@dataclasses.dataclass
class StanceVerdict:
    order: list[int]
    probe: int
    calls: list[routing.Call]

    @property
    def disagrees(self) -> bool:
        return any(not c.ok for c in self.calls)

    @property
    def nothing_compiled(self) -> bool:
        """No call found an entry in the cache nor ran a graph: torch.compile
        produced nothing (the fuzzer's process state is broken, e.g. a
        dispatch mode left on the stack), not a routing answer of guardjit's."""
        return bool(self.calls) and not any(c.cache_order or c.served for c in self.calls)

    def summary(self) -> str:
        bad = [c for c in self.calls if not c.ok]
        return "; ".join(f"{c.input}: cache {c.cache_order} expected {c.expected} served "
                         f"{c.served} result_ok={c.result_ok} error={c.error}" for c in bad)


def draw(rng: random.Random, target: StanceTarget) -> tuple[list[int], int]:
    order = list(range(len(target.inputs)))
    rng.shuffle(order)
    return order, rng.randrange(len(target.inputs))


def run_case(target: StanceTarget, order: list[int], probe: int) -> StanceVerdict:
    """Establishes ``order`` (front first) under the stance, then calls the
    probe; every call is judged against the full lookup."""
    oracle = routing.OracleRoots()
    calls = []
    try:
        with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
            for i in list(reversed(order)) + [probe]:
                inp = target.inputs[i]
                inp.setup()
                ents = routing.entries(target.code)
                expected, disagree = routing.full_pick(ents, inp.f_locals, oracle)
                target.tag.served.clear()
                error, ok = None, False
                try:
                    ok = routing.same_result(inp.compiled(), inp.expected)
                except Exception as e:  # noqa: BLE001 - a failed call is a finding
                    error = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                calls.append(routing.Call(0, inp.name, [routing.entry_id(e) for e in ents],
                                          expected, list(target.tag.served), ok, error, disagree))
    finally:
        target.restore()
    return StanceVerdict(order, probe, calls)
